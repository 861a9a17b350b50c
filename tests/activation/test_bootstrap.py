"""``sitecustomize_template/``: on PYTHONPATH, it activates fl_patch in every Python process.

Real interpreters only: what happens at start-up can only be seen from a fresh one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, SUPPORT, clean_env

TEMPLATE = REPO / "sitecustomize_template"
PROBE = str(SUPPORT / "activation" / "act_probe.py")


def env_with(*front: Path | str, **variables: str) -> dict[str, str]:
    """clean_env with ``front`` directories before the repo and test support on PYTHONPATH."""
    env = clean_env(**variables)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, front), env["PYTHONPATH"]])
    return env


def run(
    args: list[str], env: dict[str, str], executable: str = sys.executable, cwd: Path = REPO
) -> subprocess.CompletedProcess:
    return subprocess.run([executable, *args], env=env, cwd=str(cwd), capture_output=True, text=True, timeout=120)


def tagged(stdout: str, tag: str) -> object:
    (line,) = [line for line in stdout.splitlines() if line.startswith(tag)]
    return json.loads(line[len(tag) :])


def test_template_is_the_bootstrap_the_launcher_uses() -> None:
    # One file, not two kept in sync: the template is a link to the launcher's bootstrap.
    shipped = REPO / "src" / "fl_patch" / "activation" / "bootstrap" / "sitecustomize.py"
    assert (TEMPLATE / "sitecustomize.py").is_symlink()
    assert (TEMPLATE / "sitecustomize.py").resolve() == shipped.resolve()


def test_pythonpath_alone_patches_a_plain_python_program() -> None:
    env = env_with(TEMPLATE, FL_PATCH_PACKS="none", FL_PATCH_REGISTRY="act_plugin.registry")
    out = tagged(run([PROBE], env).stdout, "ACT")
    assert out["installed"] and out["greet"] == "patched hello x!" and out["status"] == "applied"
    assert out["late"] is False  # active before the program's first line


def test_fl_patch_0_imports_nothing_of_fl_patch_and_still_chains(tmp_path: Path) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("USER_MARK = 'user sitecustomize ran'\n")
    env = env_with(TEMPLATE, user, FL_PATCH="0")
    code = "import sys, sitecustomize; print('MODS' + repr(sorted(m for m in sys.modules if m.split('.')[0] == 'fl_patch')).replace(chr(39), chr(34))); print(sitecustomize.USER_MARK)"
    proc = run(["-c", code], env)
    assert tagged(proc.stdout, "MODS") == []
    assert "user sitecustomize ran" in proc.stdout


def test_the_users_sitecustomize_is_chained_after_activation(tmp_path: Path) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text(
        "import sys\nUSER_SAW_FL_PATCH = 'fl_patch' in sys.modules and sys.modules['fl_patch'].is_active()\n"
    )
    env = env_with(TEMPLATE, user)
    code = (
        "import json, sys, sitecustomize, fl_patch\n"
        "print('OUT' + json.dumps([sitecustomize.__file__, sitecustomize.USER_SAW_FL_PATCH, fl_patch.is_active(),"
        f" {str(TEMPLATE)!r} in sys.path]))"
    )
    proc = run(["-c", code], env)
    assert proc.returncode == 0, proc.stderr
    user_file, user_saw, installed, template_kept = tagged(proc.stdout, "OUT")
    assert user_file == str(user / "sitecustomize.py")  # `import sitecustomize` gives the user's module
    assert user_saw and installed
    assert template_kept  # children that rebuild PYTHONPATH from sys.path keep the bootstrap


def test_a_failing_user_sitecustomize_fails_exactly_as_without_fl_patch(tmp_path: Path) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("raise RuntimeError('the user site is broken')\n")
    code = "import sys; print('INSTALLED', 'fl_patch' in sys.modules and sys.modules['fl_patch'].is_active())"
    without = run(["-c", code], env_with(user))
    with_template = run(["-c", code], env_with(TEMPLATE, user))
    assert "Error in sitecustomize" in without.stderr
    assert with_template.stderr == without.stderr
    assert "INSTALLED True" in with_template.stdout and with_template.returncode == 0


def test_is_active_before_and_after_the_first_megatron_import() -> None:
    """Armed before megatron's first import, installed after it: ``is_active()`` is true in both states."""
    code = (
        "import fl_patch\nbefore = fl_patch.is_active()\nimport megatron.core\n"
        "print('ACTIVE', before, fl_patch.is_active(), bool(fl_patch.report()))"
    )
    proc = run(["-c", code], env_with(TEMPLATE))
    assert "ACTIVE True True True" in proc.stdout, proc.stdout + proc.stderr[-3000:]


@pytest.fixture
def broken_registry(tmp_path: Path) -> Path:
    (tmp_path / "act_broken_registry.py").write_text("raise RuntimeError('vendor SDK missing')\n")
    return tmp_path


def test_a_broken_registry_is_one_warning_and_the_program_runs(broken_registry: Path) -> None:
    env = env_with(TEMPLATE, broken_registry, FL_PATCH_REGISTRY="act_broken_registry")
    # Registries load at the program's first import (sys.path is complete by then).
    proc = run(["-c", "import json; print('PROGRAM RAN')"], env)
    assert proc.returncode == 0 and "PROGRAM RAN" in proc.stdout
    assert proc.stderr.count("FlPatchWarning") == 1
    assert "act_broken_registry" in proc.stderr and "vendor SDK missing" in proc.stderr


def test_strict_mode_stops_the_program_at_its_first_import_with_the_message(broken_registry: Path) -> None:
    env = env_with(TEMPLATE, broken_registry, FL_PATCH_REGISTRY="act_broken_registry", FL_PATCH_STRICT="1")
    proc = run(["-c", "import json; print('PROGRAM RAN')"], env)
    assert proc.returncode == 1 and "PROGRAM RAN" not in proc.stdout
    # One clear message, not a traceback through the import machinery.
    assert (
        "FlPatchError: fl_patch: registry module 'act_broken_registry' failed to import: RuntimeError: vendor SDK missing"
        in (proc.stderr)
    )
    assert "Traceback" not in proc.stderr and "Fatal Python error" not in proc.stderr
    assert "FL_PATCH_TRACEBACK=1" in proc.stderr  # how to see where it was raised


def _interpreter_without_fl_patch(cwd: Path) -> str:
    base = getattr(sys, "_base_executable", None)
    if not base or base == sys.executable:  # (a virtualenv's python is a link to its base: compare paths)
        pytest.skip("no other interpreter to run here")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(TEMPLATE)}
    probe = subprocess.run([base, "-c", "import fl_patch"], env=env, cwd=str(cwd), capture_output=True, timeout=60)
    if probe.returncode == 0:
        pytest.skip(f"{base} can import fl_patch")
    return base


def test_an_interpreter_that_cannot_import_fl_patch_says_so_when_megatron_loads(tmp_path: Path) -> None:
    base = _interpreter_without_fl_patch(tmp_path)
    fake = tmp_path / "megatron" / "core"  # stand-in for a megatron the other interpreter has
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("LOADED = True\n")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([str(TEMPLATE), str(tmp_path)])}
    quiet = run(["-c", "print('unrelated tool')"], env, executable=base, cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == ""  # processes that never import megatron hear nothing
    loud = run(["-c", "import megatron.core; print(megatron.core.LOADED)"], env, executable=base, cwd=tmp_path)
    assert loud.returncode == 0 and "True" in loud.stdout
    assert loud.stderr.count("fl_patch cannot run in this process") == 1
    assert "cannot import fl_patch" in loud.stderr and "megatron runs here unpatched" in loud.stderr
    strict = run(["-c", "import megatron.core"], {**env, "FL_PATCH_STRICT": "1"}, executable=base, cwd=tmp_path)
    assert strict.returncode == 1 and "ImportError: fl_patch cannot run in this process" in strict.stderr


def test_copied_into_a_shared_directory_it_chains_without_touching_sys_path(tmp_path: Path) -> None:
    """Copied into site-packages, say: the hidden sitecustomize can still import from that directory."""
    shared, user = tmp_path / "shared", tmp_path / "user_site"
    shared.mkdir()
    user.mkdir()
    (shared / "sitecustomize.py").write_bytes((TEMPLATE / "sitecustomize.py").read_bytes())
    (shared / "act_shared_helper.py").write_text("VALUE = 'from the shared directory'\n")
    (user / "sitecustomize.py").write_text("import act_shared_helper\nSEEN = act_shared_helper.VALUE\n")
    code = "import sys, sitecustomize, fl_patch; print('OUT', sitecustomize.SEEN, fl_patch.is_active())"
    proc = run(["-c", code], env_with(shared, user))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "OUT from the shared directory True" in proc.stdout
