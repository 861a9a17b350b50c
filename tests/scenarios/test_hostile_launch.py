"""Hostile start-up: PYTHONPATH with empty entries, two bootstrap copies, FL_PATCH_STRICT values.

From the issue "What real programs do to an import hook":

- an empty ``PYTHONPATH`` entry means the current directory; under ``python -m fl_patch``
  the program must see the ``sys.path`` plain ``python`` gives it (plus the bootstrap);
- two bootstrap ``sitecustomize`` copies (the template on ``PYTHONPATH`` and the
  launcher's, or a copy in a shared directory such as site-packages) must neither
  recurse nor hide the user's own ``sitecustomize``, which runs exactly once;
- an ``FL_PATCH_STRICT`` value that is neither true nor false is not silently
  non-strict.

Real interpreters only; the programs are tiny and import no megatron.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, SUPPORT_PATH, clean_env

TEMPLATE = REPO / "sitecustomize_template"
LAUNCHER_BOOTSTRAP = os.path.realpath(REPO / "src" / "fl_patch" / "activation" / "bootstrap")

SHOW_PATH = """
import json, sys
try:
    import hostile_cwd_mod
    found = hostile_cwd_mod.VALUE
except ImportError as exc:
    found = repr(exc)
print("RESULT" + json.dumps({"path": sys.path, "found": found}))
"""


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, cwd=str(cwd), capture_output=True, text=True, timeout=120)


def result(proc: subprocess.CompletedProcess[str]) -> dict:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert len(lines) == 1, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[0][len("RESULT") :])


@pytest.mark.parametrize(
    "pythonpath",
    [
        ["", str(REPO / "src"), *map(str, SUPPORT_PATH)],
        [str(REPO / "src"), *map(str, SUPPORT_PATH), ""],
        [str(REPO / "src"), "", *map(str, SUPPORT_PATH)],
    ],
    ids=["leading", "trailing", "middle"],
)
def test_an_empty_pythonpath_entry_means_the_cwd_as_in_plain_python(pythonpath: list[str], tmp_path: Path) -> None:
    """Bullet: the launcher drops empty PYTHONPATH entries (which mean the cwd); behave exactly as plain python.

    The script lives in one directory, the program runs in another that holds
    hostile_cwd_mod.py. Plain python finds it through the empty PYTHONPATH entry; today
    the launcher rewrites PYTHONPATH without it and the import fails. Expected: the same
    sys.path as plain python, the launcher's bootstrap directory aside, and the import works.
    """
    scripts, work = tmp_path / "scripts", tmp_path / "work"
    scripts.mkdir()
    work.mkdir()
    (scripts / "show_path.py").write_text(SHOW_PATH)
    (work / "hostile_cwd_mod.py").write_text("VALUE = 'from the cwd'\n")
    env = clean_env(PYTHONPATH=os.pathsep.join(pythonpath), FL_PATCH_PACKS="none")
    plain = result(run([str(scripts / "show_path.py")], env, work))
    launched = result(run(["-m", "fl_patch", str(scripts / "show_path.py")], env, work))
    assert plain["found"] == "from the cwd"
    assert launched["found"] == "from the cwd", launched
    without_bootstrap = [p for p in launched["path"] if os.path.realpath(p or ".") != LAUNCHER_BOOTSTRAP]
    assert without_bootstrap == plain["path"]


USER_SITECUSTOMIZE = "print('USER-SITECUSTOMIZE-RAN')\nUSER_MARK = 'user'\n"
CHECK = (
    "import sitecustomize, fl_patch\nprint('OUT', getattr(sitecustomize, 'USER_MARK', None), fl_patch.is_active())\n"
)


@pytest.fixture
def user_and_shared(tmp_path: Path) -> tuple[Path, Path]:
    """A user's sitecustomize, and a copy of the bootstrap in a shared directory (as in site-packages)."""
    user, shared = tmp_path / "user_site", tmp_path / "shared_site_packages"
    user.mkdir()
    shared.mkdir()
    (user / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    shutil.copy(TEMPLATE / "sitecustomize.py", shared / "sitecustomize.py")
    return user, shared


@pytest.mark.parametrize(
    "layout",
    ["template_and_launcher", "shared_copy_and_launcher", "template_and_shared_copy"],
)
def test_two_bootstrap_copies_do_not_recurse_and_the_users_sitecustomize_runs_once(
    layout: str, user_and_shared: tuple[Path, Path], tmp_path: Path
) -> None:
    """Bullet: two bootstrap copies (template on PYTHONPATH + python -m fl_patch, or in site-packages)
    recurse in sitecustomize; the user's sitecustomize never runs.

    Each bootstrap chains to "the sitecustomize it hides", which is the other bootstrap,
    which chains back: today a RecursionError ("Error in sitecustomize") and exit 1.
    Expected: exit 0, fl_patch active, no error at start-up, the user's sitecustomize run
    exactly once and importable as ``sitecustomize``.
    """
    user, shared = user_and_shared
    rest = [str(user), str(REPO / "src"), *map(str, SUPPORT_PATH)]
    if layout == "template_and_launcher":
        front, launcher = [str(TEMPLATE)], ["-m", "fl_patch"]
    elif layout == "shared_copy_and_launcher":
        front, launcher = [str(shared)], ["-m", "fl_patch"]
    else:
        front, launcher = [str(TEMPLATE), str(shared)], []
    env = clean_env(PYTHONPATH=os.pathsep.join(front + rest), FL_PATCH_PACKS="none")
    proc = run([*launcher, "-c", CHECK], env, tmp_path)
    assert "Error in sitecustomize" not in proc.stderr and "RecursionError" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("USER-SITECUSTOMIZE-RAN") == 1, proc.stdout
    assert "OUT user True" in proc.stdout, proc.stdout


GREET_PROGRAM = """
import sys
from act_target import mod
print("PROGRAM-RAN", mod.greet("x"))
sys.exit(7)
"""


@pytest.mark.parametrize("value", ["2", "strict"])
def test_an_unknown_fl_patch_strict_value_is_not_silently_non_strict(value: str, tmp_path: Path) -> None:
    """Bullet: unknown FL_PATCH_STRICT values silently non-strict.

    FL_PATCH_STRICT=2 (or =strict) with a registry that fails to import: today the run is
    non-strict and nothing mentions the variable. Expected: either the run is strict
    (exit 1 with the registry's FlPatchError), or a FlPatchWarning names FL_PATCH_STRICT
    and the value it did not understand.
    """
    script = tmp_path / "prog.py"
    script.write_text(GREET_PROGRAM)
    env = clean_env(FL_PATCH_PACKS="none", FL_PATCH_STRICT=value, PYTHONWARNINGS="always")
    proc = run(["-m", "fl_patch", "--registry", "fltest_broken.registry_raises", str(script)], env, REPO)
    strict = (
        proc.returncode == 1 and "fltest_broken.registry_raises" in proc.stderr and "PROGRAM-RAN" not in proc.stdout
    )
    spellings = (f"'{value}'", f'"{value}"', f"FL_PATCH_STRICT={value}")
    named = [
        line for line in proc.stderr.splitlines() if "FL_PATCH_STRICT" in line and any(s in line for s in spellings)
    ]
    assert strict or named, f"FL_PATCH_STRICT={value!r}: exit {proc.returncode}, nothing said\n{proc.stderr[-2000:]}"
