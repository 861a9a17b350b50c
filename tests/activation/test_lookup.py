"""One registry lookup for every mode (``fl_patch/host/registry_lookup.py``): what ``--check`` finds from a directory,
the run (a script elsewhere, torchrun's workers) finds from it; what neither finds, both refuse with one message.

The plugin (a copy of ``tests/support/plugins/fltest_two``) is in a directory that is on nobody's ``PYTHONPATH``:
the directory the job is started from. The program is in another directory, so the script's directory on
``sys.path`` does not reach it, as with Megatron-LM's ``pretrain_gpt.py`` run from a plugin's checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, SUPPORT

PROBE = """
import json, fl_patch
from megatron.core import utils
from megatron.core.optimizer import clip_grads
status = {r.target: [r.status.value, r.impl] for r in fl_patch.report() if r.source.startswith("fltest_two")}
print("PROBE" + json.dumps(status))
"""


def _layout(root: Path) -> tuple[Path, Path]:
    checkout = root / "checkout"
    shutil.copytree(SUPPORT / "plugins" / "fltest_two", checkout / "fltest_two")
    (root / "elsewhere").mkdir()
    program = root / "elsewhere" / "probe.py"
    program.write_text(PROBE)
    return checkout, program


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """(the plugin's directory, where the job starts; the program, in a directory of its own)."""
    return _layout(tmp_path)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k == "MG_FL_PREFER")}
    env["PYTHONPATH"] = str(REPO / "src")  # fl_patch only: not the plugin's directory, not tests/support
    env["PYTHONWARNINGS"] = "ignore::UserWarning:megatron,ignore:Transformer Engine and Apex:UserWarning"
    env["COLUMNS"] = "300"  # one message, one line: compared across modes
    return env


def _fl_patch(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fl_patch", *args],
        env=_env(),
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _probe(proc: subprocess.CompletedProcess[str]) -> list[dict[str, list[str]]]:
    return [json.loads(line[len("PROBE") :]) for line in proc.stdout.splitlines() if line.startswith("PROBE")]


def _message(text: str, marker: str) -> str:
    """The one message with ``marker`` (one line holds it: the registry's one message), with the prefix of its
    surface (warning line, --check error) cut and the continuation lines --check wrapped it into joined."""
    lines = text.splitlines()
    (index,) = [i for i, line in enumerate(lines) if marker in line]
    message = [lines[index][lines[index].index("fl_patch: registry module") :]]
    for line in lines[index + 1 :] if marker.startswith("error: ") else []:
        if not line.startswith("  "):
            break
        message.append(line.strip())
    return " ".join(message)


def test_check_and_the_run_both_find_a_plugin_in_the_directory_the_job_starts_in(layout: tuple[Path, Path]) -> None:
    checkout, program = layout
    check = _fl_patch(checkout, "--registry", "fltest_two.registry", "--strict", "--check", "--only", "pack=none")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "yours: 2 registration(s) checked, from fltest_two.registry: 2 ok" in check.stdout, check.stdout
    run = _fl_patch(checkout, "--registry", "fltest_two.registry", "--strict", str(program))
    assert run.returncode == 0, run.stderr
    (status,) = _probe(run)
    assert status == {
        "megatron.core.utils.divide": ["applied", "fltest_two.impls.divide"],
        "megatron.core.optimizer.clip_grads.get_grad_norm_fp32": ["applied", "fltest_two.impls.get_grad_norm_fp32"],
    }, run.stderr
    # The directory is not put on sys.path: a module there supplies nothing but the plugin.
    (checkout / "json_planted.py").write_text("raise SystemExit('imported from the start directory')\n")
    (program.parent / "uses.py").write_text("import importlib.util\nprint(importlib.util.find_spec('json_planted'))\n")
    assert _fl_patch(checkout, "--registry", "fltest_two.registry", str(program.parent / "uses.py")).stdout == "None\n"


@pytest.mark.slow
def test_torchrun_workers_find_it_too(layout: tuple[Path, Path]) -> None:
    checkout, program = layout
    args = ["--registry", "fltest_two.registry", "--strict", "-m", "torch.distributed.run", "--standalone"]
    run = _fl_patch(checkout, *args, "--nproc-per-node", "2", str(program))
    assert run.returncode == 0, run.stderr
    statuses = _probe(run)
    assert len(statuses) == 2 and all(status["megatron.core.utils.divide"][0] == "applied" for status in statuses), (
        run.stdout
    )


MISSPELT = ("fltest_two.registyr", "fltest_tow.registry")  # a module of the plugin, the plugin's own name
HALF = "fltest_two.half"  # a registry that raises on its third line
WARNING = "FlPatchWarning: fl_patch: registry module '{}'"
ERROR = "error: fl_patch: registry module '{}'"
# (the start directory, --check, the run)
Refused = tuple[Path, subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]


def _warnings(run: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in run.stderr.splitlines() if "FlPatchWarning" in line]


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> Refused:
    """(the start directory, ``--check`` of the misspelt registries, the run of them and of the half-way one).

    Each registry that does not load is said in a message of its own (a warning line in the run, an error in
    ``--check``), so one ``--check`` and one run, each naming them all, show every message a process per
    registry showed."""
    checkout, program = _layout(tmp_path_factory.mktemp("refused"))
    (checkout / "fltest_two" / "half.py").write_text(
        "from fl_patch import register\n"
        "register(target='megatron.core.utils.divide', impl='fltest_two.impls.divide')\n"
        "raise RuntimeError('third line')\n"
    )
    check = _fl_patch(checkout, "--registry", ",".join(MISSPELT), "--check", "--only", "pack=none")
    run = _fl_patch(checkout, "--registry", ",".join([*MISSPELT, HALF]), str(program))
    return checkout, check, run


def test_a_misspelt_registry_is_refused_with_one_message_in_both_modes(refused: Refused) -> None:
    checkout, check, run = refused
    assert check.returncode == 1 and run.returncode == 0, check.stdout + run.stderr  # a warning, not strict
    # One message per registry that does not load (each marker is on one line), and nothing else said.
    assert len(_warnings(run)) == 3 and check.stdout.count("error: fl_patch: registry module") == 2, check.stdout
    said = _message(run.stderr, WARNING.format("fltest_two.registyr"))
    assert said == _message(check.stdout, ERROR.format("fltest_two.registyr"))
    assert f"package fltest_two ({checkout / 'fltest_two'}) has no module 'registyr'" in said
    assert "(did you mean fltest_two.registry?)" in said and "PYTHONPATH" not in said
    # A top-level name found nowhere: where it was looked for, and the fix, in both modes.
    said = _message(run.stderr, WARNING.format("fltest_tow.registry"))
    assert said == _message(check.stdout, ERROR.format("fltest_tow.registry"))
    assert f"nor in the directory the job started in ({checkout})" in said and "(did you mean fltest_two?)" in said
    assert "Fix: start the job from the directory that holds fltest_tow, put that directory on PYTHONPATH" in said


def test_a_registry_that_fails_half_way_names_what_it_drops(refused: Refused) -> None:
    checkout, _, run = refused
    assert len(_warnings(run)) == 3, run.stderr  # its own, and one for each misspelt registry
    (line,) = [line for line in _warnings(run) if WARNING.format(HALF) in line]
    assert line.startswith(f"{checkout / 'fltest_two' / 'half.py'}:3: FlPatchWarning: "), line
    assert "RuntimeError: third line" in line
    assert "its 1 registration(s) made before that line (megatron.core.utils.divide) are dropped too" in line


def test_a_bare_directory_of_the_same_name_beside_the_script_does_not_hide_the_plugin(tmp_path: Path) -> None:
    """examples/my_plugin beside examples/train_gpt.py, run from examples/my_plugin: on sys.path (the script's
    directory) ``fltest_two`` is a namespace package (a directory without ``__init__.py``), which has no
    ``registry``; the regular package in the start directory wins, as it would anywhere on sys.path."""
    checkout = tmp_path / "fltest_two"  # the plugin's checkout, named as its package
    shutil.copytree(SUPPORT / "plugins" / "fltest_two", checkout / "fltest_two")
    program = tmp_path / "probe.py"  # its parent holds the checkout: a namespace `fltest_two` on sys.path
    program.write_text(PROBE)
    run = _fl_patch(checkout, "--registry", "fltest_two.registry", "--strict", str(program))
    assert run.returncode == 0, run.stderr
    (status,) = _probe(run)
    assert status["megatron.core.utils.divide"] == ["applied", "fltest_two.impls.divide"], run.stderr
    assert "FlPatchWarning" not in run.stderr
