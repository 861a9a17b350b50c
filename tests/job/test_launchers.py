"""The rank check and the merged report under real launchers: torchrun (one node, two nodes on localhost, restarts), mpirun.

Every run is real: torchrun's agents and workers, gloo process groups, megatron-core imported
in every worker. A "node" is a torchrun launcher process with its own environment; the two
meet through c10d rendezvous on a free localhost port. The node without fl_patch has
``.cache/triton-cpu`` on its path instead, so that upstream megatron-core imports there
without fl_patch, as it does on a GPU node (skipped where that Triton is not installed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import REPO, SUPPORT, TRITON_CPU, clean_env, support_pythonpath
from ..support.ports import free_port

pytestmark = pytest.mark.slow

JOB = SUPPORT / "job"
WORKER = JOB / "job_worker.py"
TORCHRUN = ["-m", "torch.distributed.run"]  # after `python` or `python -m fl_patch [options]`
FL_PATCH = [sys.executable, "-m", "fl_patch", "--registry", "job_registry"]


def _env(**extra: str) -> dict[str, str]:
    env = clean_env(FL_PATCH_PACKS="none", PYTHONPATH=support_pythonpath(JOB), PYTHONWARNINGS="ignore", **extra)
    for name in [n for n in env if n.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "TORCHELASTIC"))]:
        del env[name]
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=str(cwd), capture_output=True, text=True, timeout=timeout)


def _jobs(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line[3:]) for line in stdout.splitlines() if line.startswith("JOB")]


def _seen(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-6000:]}"


@pytest.fixture(scope="module")
def restarted_job(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One standalone job of two ranks that agree, under ``--report``, restarted once: rank 1 exits on the first
    attempt (before it imports megatron or joins a group) and torchrun (``--max-restarts 1``) starts both ranks
    again. The two tests below read it: a job that trains on and reports once, merged (the second attempt's
    report), and the restart."""
    args = [*FL_PATCH, "--report", *TORCHRUN, "--standalone", "--nproc-per-node", "2"]
    args += ["--max-restarts", "1", str(WORKER), "--fail-once", "1"]
    return _run(args, _env(), tmp_path_factory.mktemp("restarted_job"))


def test_torchrun_ranks_that_agree_train_on_and_report_once_merged(
    restarted_job: subprocess.CompletedProcess[str],
) -> None:
    """``--report`` in a job whose ranks agree (``restarted_job``): what its two ranks ran, said once for the job."""
    proc = restarted_job
    seen = _seen(proc)
    assert proc.returncode == 0, seen
    jobs = _jobs(proc.stdout)
    assert sorted(j["rank"] for j in jobs) == [0, 1], seen
    assert all(j["check"] == "applied" and j["sum"] == 4.0 for j in jobs), seen
    # One merged view for the two workers, not a report per worker; torchrun's agent, which patched nothing, says
    # nothing after it (a "0 applied" line from the launcher would read as the job's outcome), nor does the first
    # attempt's rank 1, which ended before it imported megatron: its "0 applied" line read the same way.
    assert proc.stderr.count("fl_patch report, merged over 2 process(es) (ranks 0-1)") == 1, seen
    assert "0 differ" in proc.stderr and "megatron.core.utils.divide" in proc.stderr, seen
    assert "calls: 1 each" in proc.stderr, seen
    per_process = [line for line in proc.stderr.splitlines() if line.startswith("fl_patch report (pid")]
    assert per_process == [], seen


def test_torchrun_rank_with_another_impl_stops_the_job_with_one_table(tmp_path: Path) -> None:
    args = [*FL_PATCH, *TORCHRUN, "--standalone", "--nproc-per-node", "2", str(WORKER)]
    proc = _run(args, _env(JOB_ODD_RANK="1"), tmp_path)
    seen = _seen(proc)
    assert proc.returncode != 0 and _jobs(proc.stdout) == [], seen  # stopped at init, before any collective
    assert proc.stderr.count("megatron.core.utils.divide: differs") == 1, seen  # one table for the job
    assert "rank 0  default job_impls.divide @" in proc.stderr, seen
    assert "rank 1  default job_impls.divide_other @" in proc.stderr, seen
    assert "process group 'default' (2 ranks) do not run the same patches" in proc.stderr, seen
    assert "rank 0's output has the table" in proc.stderr, seen


def test_a_group_created_before_fl_patch_installed_is_checked_at_the_first_new_group(tmp_path: Path) -> None:
    """``init_process_group`` before the first megatron import; warn mode: the job goes on, with the table said."""
    args = [*FL_PATCH, "--rank-check", "warn", *TORCHRUN, "--standalone", "--nproc-per-node", "2", str(WORKER)]
    proc = _run([*args, "--init-first"], _env(JOB_ODD_RANK="1"), tmp_path)
    seen = _seen(proc)
    assert proc.returncode == 0 and len(_jobs(proc.stdout)) == 2, seen
    # 'default' is said by the catch-up at the first new group (the group itself, 'group 1', is checked too)
    assert "the process group 'default' (2 ranks) do not run the same patches" in proc.stderr, seen
    assert "the process group 'group 1' (2 ranks) do not run the same patches" in proc.stderr, seen
    assert "FlPatchWarning" in proc.stderr and "job_impls.divide_other" in proc.stderr, seen


def test_torchrun_max_restarts_the_restarted_workers_are_patched_again(
    restarted_job: subprocess.CompletedProcess[str],
) -> None:
    """The agent starts the restarted workers with the launcher's environment (``restarted_job``): patched again."""
    proc = restarted_job
    seen = _seen(proc)
    assert proc.returncode == 0, seen
    jobs = _jobs(proc.stdout)
    assert sorted((j["rank"], j["restart"]) for j in jobs) == [(0, "1"), (1, "1")], seen  # the second attempt
    assert all(j["installed"] and j["check"] == "applied" for j in jobs), seen
    # Each restarted worker's own records: job_registry's patch applied in both (their merged report says the same)
    assert sorted(j["rank"] for j in jobs if j["divide"] == "applied") == [0, 1], seen
    assert "applied default -> job_impls.divide" in proc.stderr, seen


def _two_nodes(
    tmp_path: Path, node1_env: dict[str, str], node1_cmd: list[str], report: bool = False, check_timeout: int = 15
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """Two torchrun nodes of one rank each; node 0 under fl_patch, waiting ``check_timeout`` s for the rank check (it
    starts once both ranks are in the process group: what the wait covers is the other node reaching the check)."""
    port = free_port()
    rdzv = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    rdzv += ["--rdzv-id", f"job46-{port}", "--max-restarts", "0"]
    node0 = [*FL_PATCH, *(["--report"] if report else []), *TORCHRUN, *rdzv, "--node-rank", "0", str(WORKER)]
    node1 = [*node1_cmd, *TORCHRUN, *rdzv, "--node-rank", "1", str(WORKER)]
    env0 = _env(FL_PATCH_RANK_CHECK_TIMEOUT=str(check_timeout))
    first = subprocess.Popen(node0, env=env0, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # node 0 hosts the rendezvous store
    second = subprocess.Popen(
        node1, env=node1_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    results = []
    for launcher in (first, second):
        try:
            out, err = launcher.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            launcher.kill()
            out, err = launcher.communicate()
        results.append(subprocess.CompletedProcess(launcher.args, launcher.returncode, out, err))
    return results[0], results[1]


def test_two_nodes_with_fl_patch_check_each_other_and_report_merged(tmp_path: Path) -> None:
    node0, node1 = _two_nodes(tmp_path, _env(), [*FL_PATCH, "--report"], report=True)
    seen = _seen(node0) + "\n=== node 1\n" + _seen(node1)
    assert node0.returncode == 0 and node1.returncode == 0, seen
    assert [j["rank"] for j in _jobs(node0.stdout)] == [0] and [j["rank"] for j in _jobs(node1.stdout)] == [1], seen
    assert "fl_patch report, merged over 2 process(es) (ranks 0-1)" in node0.stderr, seen  # printed once, by rank 0


@pytest.mark.skipif(not (TRITON_CPU / "triton").is_dir(), reason="needs .cache/triton-cpu (scripts/triton-cpu.sh)")
def test_a_node_whose_environment_lacks_fl_patch_is_named_and_the_job_stops(tmp_path: Path) -> None:
    # Node 1: no bootstrap on PYTHONPATH, no fl_patch variables; Triton there, so upstream megatron imports (a GPU node).
    env1 = {k: v for k, v in _env().items() if not k.startswith("FL_PATCH")}
    env1["PYTHONPATH"] = os.pathsep.join([str(TRITON_CPU), str(JOB), str(REPO / "src")])
    # plain python -m torch.distributed.run: node 1 never takes part, so node 0 waits out its whole timeout
    node0, node1 = _two_nodes(tmp_path, env1, [sys.executable], check_timeout=6)
    seen = _seen(node0) + "\n=== node 1\n" + _seen(node1)
    assert node0.returncode != 0 and _jobs(node0.stdout) == [], seen
    assert (
        "rank 1 of the process group 'default' (2 ranks) did not take part in fl_patch's rank check within 6 s"
        in node0.stderr
    ), seen
    assert "fl_patch is not active there" in node0.stderr, seen
    assert node1.returncode != 0, seen  # the job stopped on both nodes


MPI_WORKER = """
import json, os, sys
import torch.distributed as dist
from megatron.core import utils
import fl_patch
rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
dist.init_process_group("gloo", init_method=sys.argv[1], rank=rank, world_size=world)
dist.new_group(list(range(world)))
print("JOB" + json.dumps({"rank": dist.get_rank(), "installed": fl_patch.is_installed(), "divide": utils.divide(6, 3)}), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed (apt-get install openmpi-bin)"
)
def test_mpirun_ranks_are_patched_checked_and_reported_by_their_mpi_rank(tmp_path: Path) -> None:
    """``mpirun -np 2`` under the launcher: rank 1 (by ``OMPI_COMM_WORLD_RANK``) has another impl, and is named."""
    script = tmp_path / "mpi_worker.py"
    script.write_text(MPI_WORKER)
    report = tmp_path / "report.jsonl"
    args = [
        *FL_PATCH,
        "--report-file",
        str(report),
        "-c",
        "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))",
    ]
    args += ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, str(script)]
    args.append(f"file://{tmp_path / 'store'}")
    proc = _run(
        args, _env(JOB_ODD_RANK="1", OMPI_MCA_plm="isolated", OMPI_MCA_btl_vader_single_copy_mechanism="none"), tmp_path
    )
    seen = _seen(proc) + f"\n--- report\n{report.read_text()[-3000:] if report.exists() else ''}"
    assert proc.returncode != 0 and _jobs(proc.stdout) == [], seen
    assert proc.stderr.count("megatron.core.utils.divide: differs") == 1, seen
    assert "rank 1  default job_impls.divide_other @" in proc.stderr, seen
    entries = [json.loads(line) for line in report.read_text().splitlines()]
    ranked = sorted((e["rank"], e["rank_source"]) for e in entries if e["rank"] is not None)
    assert ranked == [("0", "OMPI_COMM_WORLD_RANK"), ("1", "OMPI_COMM_WORLD_RANK")], seen
