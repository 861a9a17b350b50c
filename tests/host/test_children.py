"""Activation reaches every process of a job: torchrun workers, spawn/forkserver children, subprocesses.

And where it cannot (a child started with -I or -E, or with an environment that
drops the bootstrap), the parent says so as it starts the child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, SUPPORT, clean_env

TORCHRUN = Path(sys.executable).with_name("torchrun")
TEMPLATE = REPO / "sitecustomize_template"


def run(args: list[str], env: dict[str, str], cwd: Path = REPO, timeout: float = 240) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, env=env, cwd=str(cwd), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def reports(stdout: str, tag: str = "ACT") -> list[dict]:
    return [json.loads(line[len(tag) :]) for line in stdout.splitlines() if line.startswith(tag)]


def test_spawn_forkserver_and_subprocess_children_are_patched() -> None:
    env = clean_env(FL_PATCH_PACKS="none")
    args = [
        sys.executable,
        "-m",
        "fl_patch",
        "--registry",
        "act_plugin.registry",
        str(SUPPORT / "activation" / "act_children.py"),
    ]
    by_label = {r["label"]: r for r in reports(run(args, env).stdout)}
    assert set(by_label) == {"parent", "spawn", "forkserver", "subprocess"}
    pids = {r["pid"] for r in by_label.values()}
    assert len(pids) == 4  # four processes, each patched on its own
    for label, report in by_label.items():
        assert report["installed"], label
        assert report["greet"] == "patched hello x!" and report["hello"] == "patched hi y", label
        assert report["status"] == "applied" and report["late"] is False, label


def test_without_the_launcher_no_child_is_patched() -> None:
    """The premise: nothing but the launcher's environment patches these children."""
    env = clean_env(FL_PATCH_PACKS="none", FL_PATCH_REGISTRY="act_plugin.registry")
    for report in reports(run([sys.executable, str(SUPPORT / "activation" / "act_children.py")], env).stdout):
        assert not report["installed"] and report["greet"] == "hello x!", report["label"]


@pytest.mark.slow
def test_torchrun_workers_on_real_megatron_each_report_the_patch(tmp_path: Path) -> None:
    """``python -m fl_patch -m torch.distributed.run --nproc-per-node 2``: gloo, real megatron.core, report at exit."""
    env = clean_env(FL_PATCH_PACKS="none")
    report_file = tmp_path / "report.jsonl"
    args = [sys.executable, "-m", "fl_patch", "--registry", "act_megatron_registry", "--report-file", str(report_file)]
    args += [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(SUPPORT / "activation" / "act_torchrun.py"),
    ]
    proc = run(args, env, cwd=tmp_path)
    # Every assertion below carries the job's output and exit reports: a failure of a
    # multi-process run must say what each process printed.
    seen = f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    ranks = {r["rank"]: r for r in reports(proc.stdout)}
    assert set(ranks) == {0, 1}, seen
    for rank, report in ranks.items():
        assert report["world"] == 2 and report["installed"], (rank, report, seen)
        assert report["divide"] == ["patched", 2] and report["status"] == "applied" and not report["late"], (
            rank,
            report,
            seen,
        )
        assert report["gathered"] == [["patched", 2], ["patched", 2]], (rank, report, seen)  # saw the other patched
    # The exit report of every process: the agent (which never imports megatron) and both workers.
    text = report_file.read_text()
    seen += f"\n--- exit reports\n{text[-4000:]}"
    exits = [json.loads(line) for line in text.splitlines()]
    workers = [e for e in exits if e["rank"] is not None]
    assert sorted(int(e["rank"]) for e in workers) == [0, 1], seen
    for entry in workers:
        divide = next(r for r in entry["records"] if r["target"] == "megatron.core.utils.divide")
        assert divide["status"] == "applied" and divide["calls"] == 1, (divide, seen)
    agents = [e for e in exits if e["rank"] is None]
    assert len(agents) == 1, seen
    assert all(r["status"] == "waiting" for r in agents[0]["records"]), seen


def test_plain_torchrun_with_the_template_on_pythonpath(tmp_path: Path) -> None:
    if not TORCHRUN.exists():
        pytest.skip("torchrun is not installed next to this interpreter")
    env = clean_env(FL_PATCH_PACKS="none", FL_PATCH_REGISTRY="act_plugin.registry")
    env["PYTHONPATH"] = f"{TEMPLATE}:{env['PYTHONPATH']}"
    args = [
        str(TORCHRUN),
        "--standalone",
        "--nproc-per-node",
        "2",
        str(SUPPORT / "activation" / "act_probe.py"),
        "worker",
    ]
    workers = reports(run(args, env, cwd=tmp_path).stdout)
    assert sorted(r["rank"] for r in workers) == ["0", "1"]
    for report in workers:
        assert report["installed"] and report["greet"] == "patched hello x!" and not report["late"], report


def test_children_out_of_reach_are_named_as_they_start() -> None:
    env = clean_env(FL_PATCH_PACKS="none")
    proc = run([sys.executable, "-m", "fl_patch", str(SUPPORT / "activation" / "act_launches.py")], env)
    children = dict(line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("CHILD"))
    assert children == {
        "inherits": "True",
        "isolated": "False",
        "bare-env": "False",
        "other-vendor": "True",
        "turned-off": "False",
        "shell-E": "False",
    }
    warnings = [line for line in proc.stderr.splitlines() if "FlPatchWarning" in line]
    assert len(warnings) == 4, proc.stderr
    by_child = {w.rsplit(" ", 1)[-1]: w for w in warnings}
    assert "started with -I" in by_child["isolated"]
    assert "no fl_patch bootstrap directory on PYTHONPATH" in by_child["bare-env"]
    assert "sets MG_FL_PREFER differently" in by_child["other-vendor"]
    assert "started with -E" in by_child["shell-E"]
    # Each warning points at the program's line that started the child.
    assert all(w.startswith(str(SUPPORT / "activation" / "act_launches.py")) for w in warnings)


@pytest.mark.parametrize(
    ("options", "flags"),
    [
        (["-I", "-c", "x"], {"I"}),
        (["-u", "-E", "script.py", "-I"], {"E"}),
        (["-IS", "-m", "mod"], {"I", "S"}),
        (["-X", "dev", "-Wignore", "-sE", "x.py"], {"E"}),
        (["-c", "-I"], set()),
        (["--check-hash-based-pycs", "always", "-S", "x"], {"S"}),
    ],
)
def test_interpreter_flags_of_a_child_command_line(options: list[str], flags: set[str]) -> None:
    from fl_patch.host.children import interpreter_flags

    assert interpreter_flags(options) == flags


def test_flags_matter_only_when_activation_comes_through_pythonpath(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With the bootstrap in a site directory instead, -I and -E children still run it; -S ones do not."""
    from fl_patch.host import children as _children
    from fl_patch.runtime import RUNTIME

    monkeypatch.setattr(RUNTIME.children, "bootstrap_dirs", {os.path.realpath(tmp_path)})
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert len(_children.diagnose(sys.executable, [sys.executable, "-I", "-E", "-S", "x.py"], None)) == 3
    monkeypatch.setenv("PYTHONPATH", "")
    (cause,) = _children.diagnose(sys.executable, [sys.executable, "-I", "-E", "-S", "x.py"], None)
    assert "-S" in cause
    assert _children.diagnose(sys.executable, [sys.executable, "-I", "x.py"], {"PATH": "/bin"}) == []


def test_a_spawn_child_whose_environment_lost_the_bootstrap_is_named() -> None:
    """multiprocessing's spawn start method reaches the launch functions fl_patch watches."""
    env = clean_env(FL_PATCH_PACKS="none")
    proc = run([sys.executable, "-m", "fl_patch", str(SUPPORT / "activation" / "act_spawn_without_bootstrap.py")], env)
    assert "CHILD spawn False" in proc.stdout  # the child really runs without fl_patch
    warnings = [line for line in proc.stderr.splitlines() if "FlPatchWarning" in line]
    assert len(warnings) == 1, proc.stderr
    assert "no fl_patch bootstrap directory on PYTHONPATH" in warnings[0]
    assert warnings[0].startswith(f"{SUPPORT / 'activation' / 'act_spawn_without_bootstrap.py'}:")
