"""Megatron-LM's own CUDA code, unchanged, on this CPU: its example and some of its unit tests.

These need a Megatron-LM checkout (tag ``core_v0.19.0`` for megatron-core 0.19.x), which CI
does not fetch: set ``MEGATRON_LM=/path/to/Megatron-LM`` to run them; otherwise
they skip. (Not an ``FL_PATCH_*`` name: ``tests/conftest.py`` clears those.) The unit-test check also needs Megatron-LM's test dependencies
(``bench/megatron_unit_tests.py --install-deps`` puts them in ``.cache/megatron-lm-test-deps``).
The full measurement is ``bench/megatron_unit_tests.py`` (``docs/cuda_on_cpu.md``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env

MEGATRON_LM = Path(os.environ.get("MEGATRON_LM", "/nonexistent"))
EXAMPLE = MEGATRON_LM / "examples" / "run_simple_mcore_train_loop.py"
ANNOUNCEMENT = "fl_patch CPU pack: no GPU here; CUDA calls run on the CPU"

pytestmark = pytest.mark.skipif(
    not EXAMPLE.is_file(), reason="set MEGATRON_LM to a Megatron-LM checkout (core_v0.19.0) to run these"
)


def _fl_patch(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fl_patch", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def test_upstream_example_trains_saves_and_loads_on_two_ranks(tmp_path: Path) -> None:
    """``run_simple_mcore_train_loop.py`` unchanged under torchrun (it asks for TP=2): nccl, set_device,
    ``gpt_model.to(torch.device("cuda"))``, ``compile_helpers()``, dist_checkpointing save and load."""
    proc = _fl_patch(
        ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(EXAMPLE)], clean_env(), tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    for iteration in range(5):
        assert proc.stdout.count(f"Iteration {iteration}: Losses reduced: [{{'lm loss': tensor(") == 2, proc.stdout
    assert proc.stdout.count("Successfully loaded the model") == 2
    assert (tmp_path / "ckpt").is_dir()
    assert proc.stderr.count(ANNOUNCEMENT) == 1


def test_upstream_example_on_one_rank_stops_where_a_one_gpu_machine_stops(tmp_path: Path) -> None:
    """The example hard-codes ``tensor_model_parallel_size=2``: one process fails in megatron's own
    world-size check, as on a machine with one GPU, after every CUDA call before it ran."""
    env = clean_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29561")
    proc = _fl_patch([str(EXAMPLE)], env, tmp_path)
    assert proc.returncode != 0
    assert "RuntimeError: world_size (1) is not divisible by 2" in proc.stderr, proc.stderr[-4000:]
    for cuda_failure in ("Torch not compiled with CUDA", "_cuda_setDevice", "NCCL built in"):
        assert cuda_failure not in proc.stderr  # set_device and init_process_group("nccl") ran
    assert ANNOUNCEMENT in proc.stderr


def test_upstream_unit_tests_gain_passes_and_lose_none() -> None:
    """Two of Megatron-LM's unit-test files at world size 1: with the transfer on, every test that
    passes with it off still passes, and more pass."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import megatron_unit_tests as bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    missing = [
        m for m in bench.DEP_MODULES if not (bench.DEPS_DIR / m).exists() and not (bench.DEPS_DIR / f"{m}.py").exists()
    ]
    if missing:
        pytest.skip(
            f"Megatron-LM's test dependencies are not installed ({', '.join(missing)}): bench/megatron_unit_tests.py --install-deps"
        )
    unit_tests = MEGATRON_LM / "tests" / "unit_tests"
    files = [unit_tests / "tensor_parallel" / "test_random.py", unit_tests / "test_utils.py"]
    passed = {}
    for mode in ("off", "on"):
        results = [bench.run_file(MEGATRON_LM, f, mode, per_test=120, per_file=400) for f in files]
        passed[mode] = {test for r in results for test, outcome in r["outcomes"].items() if outcome == "passed"}  # type: ignore[union-attr]
    assert passed["off"] <= passed["on"], passed["off"] - passed["on"]
    assert len(passed["on"]) > len(passed["off"])
