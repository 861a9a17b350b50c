"""Ray: actors get the driver's fl_patch through fl_patch.job.ray.runtime_env, train megatron at TP=2, and are rank-checked.

A real local Ray cluster (``ray start --head --block``, from PyPI's ray: the ``ray`` extra), started
from an environment *without* fl_patch, as a cluster a job is submitted to is: its raylet starts
the workers, so nothing of the driver's environment reaches them but the job's runtime_env.
The driver runs under ``python -m fl_patch``. Each test's driver is ``tests/support/job/ray_job.py``.
The cluster's processes are this test's own session (started with ``start_new_session``) and are
ended by their pids at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import REPO, SUPPORT, clean_env
from ..support.ports import free_port

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")

pytestmark = pytest.mark.slow

JOB = SUPPORT / "job"
RAY = Path(sys.executable).with_name("ray")


def _session_pids(session: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session:  # stat's 6th field, the session id
                pids.append(int(entry))
    return pids


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A one-node Ray cluster whose environment has no fl_patch (only fl_patch importable, as on a node it is installed on)."""
    env = {k: v for k, v in clean_env().items() if not k.startswith("FL_PATCH")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(JOB)])
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # No token: Ray 2.5x writes one to ~/.ray/auth_token at a local ray.init() and then requires it of every
    # cluster started after; these tests touch nothing outside their own directories.
    env["RAY_AUTH_MODE"] = "disabled"
    temp = tempfile.mkdtemp(prefix="rj46_", dir="/tmp")  # short: Ray's unix socket paths must fit
    port = free_port()
    args = [str(RAY), "start", "--head", "--block", "--port", str(port), "--num-cpus", "4", "--temp-dir", temp]
    args += ["--include-dashboard", "false", "--disable-usage-stats", "--dashboard-port", str(free_port())]
    args += ["--dashboard-agent-listen-port", str(free_port()), "--num-gpus", "0"]
    log = open(Path(temp) / "start.log", "w")  # open for the cluster's life
    head = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "This command will now block" not in (Path(temp) / "start.log").read_text():
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail("ray start failed:\n" + (Path(temp) / "start.log").read_text()[-3000:])
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        with_session = _session_pids(head.pid)
        for pid in with_session:
            try:
                os.kill(pid, signal.SIGKILL)  # Ray's own shutdown on SIGTERM can hang; these are this test's pids
            except ProcessLookupError:
                pass
        head.wait(30)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _driver(cluster: str, mode: str, tmp_path: Path) -> tuple[dict[str, object], subprocess.CompletedProcess[str]]:
    out = tmp_path / f"{mode}.json"
    env = clean_env(PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(JOB), str(SUPPORT)]), PYTHONWARNINGS="ignore")
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")  # (see the cluster fixture)
    args = [sys.executable, "-m", "fl_patch", str(JOB / "ray_job.py"), cluster, mode, str(out), str(tmp_path)]
    proc = subprocess.run(args, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=400)
    seen = f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0 and out.exists(), seen
    return json.loads(out.read_text()), proc


TOLD = "fl_patch: this Ray driver runs with fl_patch, but the actor"


def test_actors_started_without_fl_patch_run_unpatched_and_the_driver_is_told_once(
    cluster: str, tmp_path: Path
) -> None:
    result, proc = _driver(cluster, "plain", tmp_path)
    states = result["states"]
    assert len(states) == 2 and all(not s["fl_patch_imported"] and not s["active"] for s in states), states  # type: ignore[index,union-attr]
    assert all(s["user_var"] == "kept" and s["user_hook"] == "ran" for s in states), states  # type: ignore[index,union-attr]
    assert proc.stderr.count(TOLD) == 1, proc.stderr[-4000:]  # two actors, one message
    assert "actor Probe" in proc.stderr and "fl_patch.job.ray.runtime_env" in proc.stderr


def test_a_driver_that_starts_its_own_cluster_gives_its_workers_its_environment(tmp_path: Path) -> None:
    """``ray.init()`` with no cluster to join: the raylet is this driver's child, its workers are patched, nothing said."""
    result, proc = _driver("", "local", tmp_path)
    (state,) = result["states"]  # type: ignore[misc]
    assert state["active"] and state["bootstrap_on_pythonpath"], state  # type: ignore[index]
    assert TOLD not in proc.stderr, proc.stderr[-3000:]


def _trained(result: dict[str, object]) -> list[float]:
    train = result["train"]
    assert all("error" not in t for t in train), train  # type: ignore[union-attr]
    for t in train:  # type: ignore[union-attr]
        assert t["installed"] and t["active"] and t["check"] == "applied" and t["bootstrap_on_pythonpath"], t
        assert t["user_var"] == "kept" and t["user_hook"] == "ran", t  # the user's runtime_env merged, its hook chained
    losses = train[0]["losses"]  # type: ignore[index]
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    return losses  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def fl_run(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], str]:
    """The job with fl_patch's runtime_env on two plain actors: its result and the driver's stderr."""
    result, proc = _driver(cluster, "fl", tmp_path_factory.mktemp("fl"))
    return result, proc.stderr


def test_actors_with_fl_patch_s_runtime_env_train_megatron_at_tp2(fl_run: tuple[dict[str, object], str]) -> None:
    result, stderr = fl_run
    _trained(result)
    assert TOLD not in stderr


def test_a_worker_group_created_as_verl_creates_one_trains_the_same(
    cluster: str, fl_run: tuple[dict[str, object], str], tmp_path: Path
) -> None:
    """A placement group, per-actor runtime_env env_vars (RANK, MASTER_ADDR...), rank 0's address from a named actor."""
    verl, proc = _driver(cluster, "verl", tmp_path)
    assert [s["rank_env"] for s in verl["states"]] == ["0", "1"]  # type: ignore[union-attr]  # per-actor env_vars kept
    # The losses of the plain actors' run of the same job, in this session: the same seeds, the same patches, the
    # same layout (TP=2). Not to the last bit: the two jobs' actors are separate worker processes, and a CPU
    # matmul's sums may be split differently between runs (seen: 4.8815346 against 4.8815351).
    assert _trained(verl) == pytest.approx(_trained(fl_run[0]), rel=1e-6, abs=0)
    assert TOLD not in proc.stderr


def test_an_actor_with_other_patches_stops_both_actors_at_their_group_s_creation(cluster: str, tmp_path: Path) -> None:
    result, proc = _driver(cluster, "odd", tmp_path)
    errors = [t.get("error", "") for t in result["train"]]  # type: ignore[union-attr]
    assert all(e.startswith("FlPatchError") for e in errors), errors
    assert "the table is printed above" in errors[0] and "rank 0's output has the table" in errors[1], errors
    # The table, from rank 0's worker (Ray forwards the worker's stderr to the driver's).
    assert "Float16OptimizerWithFloat16Params.__init__: differs" in proc.stderr, proc.stderr[-4000:]
    assert "rank 1  disabled" in proc.stderr, proc.stderr[-4000:]


def test_runtime_env_merges_into_the_user_s_and_prints_for_ray_job_submit() -> None:
    from fl_patch.job import ray as fl_ray

    base = {
        "pip": ["x"],
        "env_vars": {"PYTHONPATH": "/code", "MG_FL_PREFER": "musa", "A": "1"},
        "worker_process_setup_hook": "mine.setup",
    }
    environ = {"FL_PATCH_STRICT": "1", "MG_FL_PREFER": "cpu", "FL_PATCH_LAUNCHED": "42", "HOME": "/root"}
    merged = fl_ray.runtime_env(base, environ=environ)
    env_vars = merged["env_vars"]
    assert merged["pip"] == ["x"] and merged["worker_process_setup_hook"] == fl_ray.SETUP_HOOK
    assert env_vars["FL_PATCH_RAY_NEXT_HOOK"] == "mine.setup"  # the user's hook runs after fl_patch's
    assert env_vars["PYTHONPATH"] == f"{fl_ray.bootstrap_dir()}:/code" and env_vars["A"] == "1"
    assert env_vars["MG_FL_PREFER"] == "musa" and env_vars["FL_PATCH_STRICT"] == "1"  # the user's value wins
    assert "FL_PATCH_LAUNCHED" not in env_vars and "HOME" not in env_vars  # per-process, and not fl_patch's
    assert base["env_vars"]["PYTHONPATH"] == "/code"  # the user's dict is not changed
    fresh = fl_ray.runtime_env(environ={})
    assert fresh["env_vars"]["PYTHONPATH"] == f"{fl_ray.bootstrap_dir()}:${{PYTHONPATH}}"  # Ray expands it
    assert fl_ray.reaches(fresh) and fl_ray.reaches({"env_vars": {"PYTHONPATH": fl_ray.bootstrap_dir()}})
    assert not fl_ray.reaches({"env_vars": {"PYTHONPATH": "/code"}})
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch.job.ray", json.dumps({"env_vars": {"X": "1"}})],
        env=clean_env(FL_PATCH_PACKS="cpu"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    printed = json.loads(proc.stdout)
    assert printed["worker_process_setup_hook"] == fl_ray.SETUP_HOOK
    assert printed["env_vars"]["X"] == "1" and printed["env_vars"]["FL_PATCH_PACKS"] == "cpu"
