"""The main job: ``examples/train_gpt.py``, an ordinary megatron-core script, trains on this CPU.

Every run here is a real process (``python -m fl_patch ...``, or torchrun under
``python -m fl_patch -m torch.distributed.run``) on the real megatron-core; the script
writes one JSON line per step, which the tests read. Loss values are compared exactly
where the computation is the same (a resumed run), and to a relative 1e-5 where only the
order of floating-point sums differs (tensor or data parallel against one process).
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env

EXAMPLE = REPO / "examples" / "train_gpt.py"
UNVERIFIED = "not a release it was verified on"


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def train(tmp_path: Path, name: str, *args: str, ranks: int = 1, timeout: float = 240) -> tuple[list[dict], str]:
    """Run the example under fl_patch; returns its per-step records and its stderr."""
    log = tmp_path / f"{name}.jsonl"
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] if ranks > 1 else []
    command = [sys.executable, "-m", "fl_patch", *launcher, str(EXAMPLE), *args, "--log-file", str(log)]
    # One OpenMP thread in every process, as torchrun gives each of its workers (OMP_NUM_THREADS=1 when unset),
    # one process alone included: this model is too small to gain from a second thread, and on a shared CPU
    # the second one mostly spins waiting for a core (measured on this 2-core machine: an fp16 step took 2 to
    # 10 times the CPU seconds with two). Runs whose losses are compared all run so.
    env = clean_env(OMP_NUM_THREADS="1")
    proc = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-8000:]}"
    return records(log), proc.stderr


def losses(run: list[dict]) -> list[float]:
    return [r["loss"] for r in run]


def test_plain_python_stops_at_upstreams_first_cuda_assumption(run_python) -> None:
    """Without fl_patch, on this CPU machine, the same script dies inside megatron-core."""
    proc = run_python(str(EXAMPLE), "--steps", "3", check=False, timeout=120)
    assert proc.returncode != 0
    assert "No module named 'triton'" in proc.stderr
    assert "megatron/core/transformer/moe/ops/paged_stash.py" in proc.stderr  # upstream's `import triton`
    assert "step 1/" not in proc.stderr


@pytest.mark.slow
def test_fp16_with_recompute_trains_and_resumes_with_identical_loss(tmp_path: Path) -> None:
    """fp16 (dynamic loss scaling, overflow steps skipped), activation recompute, dropout on,
    dist_checkpointing save at step 5; a second process resumes from it and must reproduce
    steps 6-10 exactly: weights, Adam state, loss scaler, LR schedule and every RNG stream
    (dropout, the tracker's model-parallel state) come back."""
    checkpoints = tmp_path / "checkpoints"
    common = ["--precision", "fp16", "--recompute", "--steps", "10", "--initial-loss-scale", str(2.0**21)]
    first, stderr = train(tmp_path, "first", *common, "--save", str(checkpoints), "--save-interval", "5")

    # The progress bar: plain stderr text with the loss, the throughput, elapsed time and ETA.
    assert "step 10/10" in stderr and "tokens/s" in stderr and "loss " in stderr
    last = [line for line in stderr.splitlines() if "step 10/10" in line][-1]
    match = re.search(r"step 10/10  loss \d+\.\d{4}  ([\d,]+) tokens/s  \d+:\d\d elapsed, 0:00 left$", last)
    assert match, last
    # tokens/s is the run's mean (all steps' tokens / all steps' time), not the last step's own figure.
    tokens = 4 * 2 * 64  # the default micro-batch size, micro-batches and sequence length
    mean = 10 * tokens / sum(tokens / r["tokens_per_s"] for r in first)
    assert float(match.group(1).replace(",", "")) == pytest.approx(mean, abs=1), (last, mean)
    assert UNVERIFIED not in stderr
    assert [r["step"] for r in first] == list(range(1, 11))
    # Overflowing steps are found and skipped: the LR schedule does not move on them, and the
    # loss scale backs off until updates go through.
    assert not first[0]["updated"] and first[0]["lr"] == 0.0
    assert sum(r["updated"] for r in first) >= 5
    for before, record in itertools.pairwise(first):
        if not record["updated"]:
            assert record["lr"] == before["lr"]
    scales = [r["loss_scale"] for r in first]
    assert scales[0] == 2.0**21 and min(scales) < scales[0]
    # The loss falls.
    assert first[-1]["loss"] < first[0]["loss"] - 0.5
    assert (checkpoints / "step_000005").is_dir() and (checkpoints / "step_000010").is_dir()

    resumed, stderr = train(tmp_path, "resumed", *common, "--load", str(checkpoints / "step_000005"))
    assert "from step 5" in stderr
    assert [r["step"] for r in resumed] == list(range(6, 11))
    for key in ("loss", "lr", "loss_scale", "updated", "grad_norm"):
        assert [r[key] for r in resumed] == [r[key] for r in first[5:]], key


@pytest.mark.slow
def test_tensor_and_data_parallel_over_two_ranks_match_one_process(tmp_path: Path) -> None:
    """TP=2 (plain optimizer) and DP=2 (distributed optimizer) under torchrun with gloo compute
    the same losses as one process over the same global batch (dropout off, so that only
    the order of floating-point sums differs); the DP=2 run's checkpoint resumes exactly;
    bf16 with the distributed optimizer trains."""
    same = ["--dropout", "0", "--steps", "4"]
    alone, _ = train(tmp_path, "alone", *same, "--num-microbatches", "4")
    tp2, stderr = train(tmp_path, "tp2", *same, "--num-microbatches", "4", "--tp", "2", ranks=2)
    assert "2 process(es), tp=2, dp=1" in stderr
    dp2_args = [*same, "--num-microbatches", "2", "--distributed-optimizer"]
    checkpoints = tmp_path / "dp2-checkpoints"
    dp2, stderr = train(tmp_path, "dp2", *dp2_args, "--save", str(checkpoints), "--save-interval", "2", ranks=2)
    assert "2 process(es), tp=1, dp=2" in stderr
    # The distributed optimizer's state, sharded over the two ranks, resumes exactly.
    resumed, _ = train(tmp_path, "dp2-resumed", *dp2_args, "--load", str(checkpoints / "step_000002"), ranks=2)
    assert losses(resumed) == losses(dp2)[2:]
    assert losses(alone)[-1] < losses(alone)[0] - 0.3
    for name, run in (("tp2", tp2), ("dp2", dp2)):
        assert losses(run) == pytest.approx(losses(alone), rel=1e-5), name

    bf16, _ = train(
        tmp_path, "bf16", *same, "--num-microbatches", "4", "--precision", "bf16", "--distributed-optimizer"
    )
    assert losses(bf16) == pytest.approx(losses(alone), rel=2e-2)
    assert losses(bf16)[-1] < losses(bf16)[0] - 0.3


@pytest.mark.slow
def test_te_spec_moe_grouped_gemm_and_mla_train(tmp_path: Path) -> None:
    """What recipes build, through megatron-core only: the TE layer spec without TE, 4 experts top-2
    alltoall with grouped GEMM, multi-latent attention with YaRN RoPE: it learns."""
    run, _ = train(tmp_path, "moe_mla", "--steps", "6", "--spec", "te", "--experts", "4", "--grouped-gemm", "--mla")
    losses = [r["loss"] for r in run]
    assert len(losses) == 6 and losses[-1] < losses[0] - 0.3, losses


def test_a_single_step_run_works(tmp_path: Path) -> None:
    """--steps 1 is shorter than the default warm-up (2): it trains, with no warm-up, instead of failing."""
    run, stderr = train(tmp_path, "one", "--steps", "1")
    assert [r["step"] for r in run] == [1] and run[0]["lr"] > 0
    assert re.search(r"step 1/1  loss \d+\.\d{4}  [\d,]+ tokens/s  \d+:\d\d elapsed, 0:00 left", stderr), stderr[-2000:]
