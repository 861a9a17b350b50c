"""srun, mpirun / mpiexec and ssh in the children table (``activation/wrappers.py``): the command behind them, its environment.

Parsing is unit-tested (no Slurm here); the launch watch itself runs for real in a patched
process that starts ``srun`` / ``ssh`` (not installed: the warning comes as the launch is
attempted, before the executable is looked for).
"""

from __future__ import annotations

import sys

import pytest

from fl_patch.host.wrappers import unwrap

from ..conftest import REPO, clean_env

BASE = {"PATH": "/usr/bin", "PYTHONPATH": "/boot", "SLURM_JOB_ID": "7", "FL_PATCH_STRICT": "1"}


@pytest.mark.parametrize(
    ("words", "command", "env", "explicit"),
    [
        (
            ["srun", "-N", "2", "--ntasks-per-node", "4", "-l", "python", "x.py", "-n", "3"],
            ["python", "x.py", "-n", "3"],
            BASE,
            False,
        ),
        (["srun", "-n4", "--mpi=pmix", "--", "python", "x.py"], ["python", "x.py"], BASE, False),
        (["srun", "--export=NONE", "python", "x.py"], ["python", "x.py"], {"SLURM_JOB_ID": "7"}, True),
        (
            ["srun", "--export", "PATH,FOO=1", "python"],
            ["python"],
            {"PATH": "/usr/bin", "FOO": "1", "SLURM_JOB_ID": "7"},
            True,
        ),
        (["srun", "--export=ALL,FL_PATCH_STRICT=0", "python"], ["python"], {**BASE, "FL_PATCH_STRICT": "0"}, True),
        (
            ["mpirun", "-np", "2", "--mca", "btl", "self,tcp", "-x", "PYTHONPATH", "python", "x.py"],
            ["python", "x.py"],
            BASE,
            False,
        ),
        (
            ["mpirun", "-n", "2", "-x", "FL_PATCH=0", "--bind-to", "none", "python"],
            ["python"],
            {**BASE, "FL_PATCH": "0"},
            True,
        ),
        (["mpiexec", "-genvnone", "-n", "2", "python", "x.py"], ["python", "x.py"], {}, True),
        (
            ["mpiexec", "-genv", "FL_PATCH_STRICT", "0", "-ppn", "1", "python"],
            ["python"],
            {**BASE, "FL_PATCH_STRICT": "0"},
            True,
        ),
        (
            ["ssh", "-p", "2222", "-i", "key", "-o", "BatchMode=yes", "node7", "python", "x.py", "--lr", "1"],
            ["sh", "-c", "python x.py --lr 1"],
            {},
            True,
        ),
        (
            ["srun", "-N1", "env", "-u", "PYTHONPATH", "python"],
            ["python"],
            {k: v for k, v in BASE.items() if k != "PYTHONPATH"},
            True,
        ),
    ],
)
def test_the_command_behind_a_cluster_launcher(
    words: list[str], command: list[str], env: dict[str, str], explicit: bool
) -> None:
    assert unwrap(words, BASE, False) == (command, env, explicit)


def test_slurm_export_env_is_srun_s_default() -> None:
    assert unwrap(["srun", "python"], {**BASE, "SLURM_EXPORT_ENV": "NONE"}, False) == (
        ["python"],
        {"SLURM_JOB_ID": "7", "SLURM_EXPORT_ENV": "NONE"},
        True,
    )


@pytest.mark.parametrize(
    "words",
    [["srun", "--multi-prog", "tasks.conf"], ["mpirun", "--app", "appfile"], ["ssh", "node7"], ["srun", "-N", "2"]],
)
def test_launchers_that_run_no_command_here_give_none(words: list[str]) -> None:
    assert unwrap(words, BASE, False) is None


_LAUNCHES = """
import subprocess, sys, warnings
warnings.simplefilter("always")
for argv in (["srun", "--export=NONE", "-n", "2", sys.executable, "x.py"],
             ["mpirun", "-np", "2", "-x", "FL_PATCH_STRICT=1", sys.executable, "x.py"],
             ["ssh", "-p", "22", "node7", "python3", "x.py"]):
    try:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except FileNotFoundError:
        pass
print("done")
"""


def test_a_patched_parent_names_the_python_behind_srun_mpirun_and_ssh(tmp_path, run_python) -> None:
    # A directory without mpirun/srun/ssh first on PATH would not do: they are simply looked for; whether they
    # exist does not matter, the warning is given as the launch is attempted.
    proc = run_python("-m", "fl_patch", "-c", _LAUNCHES, env=clean_env(FL_PATCH_PACKS="none"), cwd=tmp_path)
    assert proc.stdout.strip().endswith("done")
    # One warning per launch, in order, each naming the Python command behind the launcher and why.
    lines = [line for line in proc.stderr.splitlines() if "FlPatchWarning" in line]
    assert len(lines) == 3, proc.stderr
    assert "no fl_patch bootstrap directory on PYTHONPATH" in lines[0] and lines[0].endswith("python x.py")
    assert "sets FL_PATCH_STRICT differently" in lines[1] and lines[1].endswith("python x.py")
    assert "no fl_patch bootstrap directory on PYTHONPATH" in lines[2] and lines[2].endswith(": python3 x.py")


def test_repo_python_is_the_one_under_test() -> None:
    assert (REPO / "src" / "fl_patch").is_dir() and sys.executable
