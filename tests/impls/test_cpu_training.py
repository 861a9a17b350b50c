"""The CPU pack's ``megatron.training`` patches: ``megatron.training.pretrain`` trains on this CPU.

The runs use ``examples/pretrain_gpt_cpu.py``, fl_patch's own script that drives
``megatron.training`` as Megatron-LM's ``pretrain_gpt.py`` does (Megatron-LM's command
line, the GPT model-config builder or a model provider, ``tensor.cuda()`` on the batch,
mock data, ``pretrain``). Every run is a real process under ``python -m fl_patch`` (or
torchrun under it) on the real megatron-core 0.19.2; the script appends one JSON line per
micro-batch loss, which the tests read. Losses are compared exactly where the computation
is the same (a resumed run) and to a relative 1e-5 where only the order of floating-point
sums differs (two tensor-parallel ranks against one process).

What each patch protects, measured by turning it off (``FL_PATCH_DISABLE``) with the same
runs, is in :data:`WITHOUT`; to repeat that check, set ``TRAINING_PACK_DISABLE`` to a
comma-separated list of targets: the runs here then go without them, and the tests that
cover them fail.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env
from ..support.ports import free_port

EXAMPLE = REPO / "examples" / "pretrain_gpt_cpu.py"
ANNOUNCEMENT = "fl_patch CPU pack: no GPU here; megatron.training runs with these defaults"

# Megatron-LM's own flags, as a user of pretrain_gpt.py would give them (no CPU flag among them).
MODEL = [
    "--mock-data",
    "--transformer-impl", "local",
    "--tokenizer-type", "NullTokenizer",
    "--vocab-size", "128",
    "--make-vocab-size-divisible-by", "64",  # the same padded vocabulary for TP=1 and TP=2
    "--num-layers", "2",
    "--hidden-size", "64",
    "--num-attention-heads", "4",
    "--seq-length", "64",
    "--max-position-embeddings", "64",
    "--micro-batch-size", "2",
    "--global-batch-size", "4",
    "--train-iters", "8",
    "--lr", "1e-3",
    "--log-interval", "1",
    "--eval-interval", "4",
    "--eval-iters", "2",
    "--num-workers", "0",
]  # fmt: skip

WITHOUT: dict[str, str] = {
    "megatron.training.initialize.torch": "AssertionError: Megatron requires CUDA. (initialize.py line 66)",
    "megatron.training.arguments.torch": "Torch not compiled with CUDA enabled in validate_args with "
    "--moe-grouped-gemm (get_device_capability; test_moe_with_grouped_gemm_on_the_te_spec_trains)",
    "megatron.training.training.torch": "Torch not compiled with CUDA enabled (pretrain's start-time all-reduce)",
    "megatron.training.models.dist_utils.torch": "torch.cuda.Stream requires CUDA support (model builder's DDP wrap)",
    "megatron.training.utils.common_utils.torch": "Torch not compiled with CUDA enabled (loss averaging, param norms)",
    "megatron.training.checkpointing.torch": "Torch not compiled with CUDA enabled at --save (cuda RNG state)",
    "megatron.core.timers.torch": "Torch not compiled with CUDA enabled (Timer.start: torch.cuda.synchronize)",
    "megatron.core.rerun_state_machine.torch": "Torch not compiled with CUDA enabled (RNG state each step)",
    "megatron.training.dist_signal_handler.get_device": "RuntimeError under the fake backend of "
    "--fake-process-group (test_cpu_defaults_are_defaults_and_said_once); with gloo upstream already answers cpu",
    "megatron.training.utils.common_utils.get_device_arch_version": "Torch not compiled with CUDA enabled in "
    "validate_args when TP>1 (FlagScale target)",
    "megatron.training.initialize._compile_dependencies": "make: no makefile found; sys.exit(1) (FlagScale target)",
    "megatron.training.initialize._warmup_jit_function": "weights shifted: the CPU generator is not as seeded when "
    "the model is built, TP=2 losses differ from TP=1",
    "megatron.training.datasets.data_samplers.build_pretraining_data_loader": "a resumed run's losses differ from "
    "the first resumed iteration on (dropout drawn from a generator the data loader advanced)",
    "megatron.training.arguments.add_megatron_arguments": "Distributed package doesn't have NCCL built in; with TP=2 "
    "the CUDA_DEVICE_MAX_CONNECTIONS assertion",
    "torch.Tensor.cuda": "Torch not compiled with CUDA enabled (the script's batch.cuda(), get_model's model.cuda())",
    "typing.override": "ImportError: cannot import name 'override' from 'typing' (Python 3.11)",
}
"""Every megatron.training registration of the CPU pack, and what happens without it (measured)."""


def _env(**overrides: str) -> dict[str, str]:
    return clean_env(FL_PATCH_DISABLE=os.environ.get("TRAINING_PACK_DISABLE", ""), **overrides)


@dataclass
class Run:
    """One training run: its per-rank micro-batch losses, events, stderr and exit reports."""

    stderr: str
    pid: int
    train: dict[int, dict[int, list[float]]] = field(default_factory=lambda: defaultdict(dict))  # rank -> it -> mb
    evals: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # rank -> losses in order
    events: list[dict] = field(default_factory=list)
    reports: list[dict] = field(default_factory=list)

    def losses(self, rank: int = 0) -> list[float]:
        return [loss for it in sorted(self.train[rank]) for loss in self.train[rank][it]]


def pretrain(tmp_path: Path, name: str, *args: str, ranks: int = 1, timeout: float = 300) -> Run:
    """Run the example under fl_patch (torchrun for ``ranks`` > 1); return what it logged."""
    log, report = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.report.jsonl"
    # One OpenMP thread in every process, as torchrun gives each of its workers (OMP_NUM_THREADS=1 when unset),
    # one process alone included: this model is too small to gain from a second thread, and on a shared CPU
    # the second one mostly spins waiting for a core. Runs whose losses are compared all run so.
    env = _env(OMP_NUM_THREADS="1")
    if ranks > 1:
        launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    else:  # the plain `python -m fl_patch script.py` form: env:// rendezvous, as upstream requires
        launcher = []
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    command = [sys.executable, "-m", "fl_patch", "--report-file", str(report), *launcher, str(EXAMPLE)]
    command += [*MODEL, *args, "--fl-log-file", str(log)]
    proc = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{stdout[-3000:]}\n{stderr[-8000:]}"
    run = Run(stderr=stderr, pid=proc.pid)
    for line in log.read_text().splitlines():
        record = json.loads(line)
        if record["event"] == "loss" and record["train"]:
            run.train[record["rank"]].setdefault(record["iteration"], []).append(record["loss"])
        elif record["event"] == "loss":
            run.evals[record["rank"]].append(record["loss"])
        else:
            run.events.append(record)
    run.reports = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    return run


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    """One process (``python -m fl_patch``), hidden dropout on, eval every 4, checkpoints at 4 and 8."""
    where = tmp_path_factory.mktemp("one_rank")
    checkpoints = where / "checkpoints"
    run = pretrain(
        where,
        "first",
        "--attention-dropout", "0.0",  # attention dropout differs per TP rank by design; hidden dropout must not
        "--distributed-backend", "gloo",  # given: the pack must not claim it set it
        "--save", str(checkpoints),
        "--save-interval", "4",
    )  # fmt: skip
    return run, checkpoints


# --------------------------------------------------------------------------- FlagScale's targets, --check
def test_flagscale_training_targets_resolve_under_check() -> None:
    """``--check`` on the installed megatron-core: FlagScale's megatron.training targets are found,
    the CPU pack's impls load and fit their signatures, and every training patch is accounted for."""
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", "--check", "--json"],
        env=_env(FL_PATCH_PACKS="cpu"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = {r["target"]: r for r in json.loads(proc.stdout)["registrations"] if r["vendor"] == "cpu"}
    for target in (
        "megatron.training.dist_signal_handler.get_device",
        "megatron.training.utils.common_utils.get_device_arch_version",
        "megatron.training.initialize._compile_dependencies",
    ):
        verdict = found[target]
        assert (verdict["level"], verdict["kind"], verdict["signature"]) == ("ok", "function", "compatible"), verdict
        assert verdict["target_found"] and verdict["impl_loaded"] and verdict["engine_status"] == "applied", verdict
    # The registry's megatron.training part: its targets, the two megatron-core modules only it reaches, and what a
    # training script hits outside megatron.
    outside = {
        "torch.Tensor.cuda",
        "typing.override",
        "megatron.core.timers.torch",
        "megatron.core.rerun_state_machine.torch",
    }
    training = {
        t: r
        for t, r in found.items()
        if r["source"] == "fl_patch.impls.cpu.registry" and (t.startswith("megatron.training.") or t in outside)
    }
    # Registrations gated to other megatron-core releases (a target that moved, register(requires=)):
    # not applied here and said so, never an error; the rest are what WITHOUT lists.
    gated = {t for t, r in training.items() if r.get("not_for_version")}
    assert gated == {"megatron.training.utils.get_device_arch_version", "megatron.training.utils.torch"}, gated
    assert all(training[t]["level"] != "error" for t in gated)
    training = {t: r for t, r in training.items() if t not in gated}
    assert set(training) == set(WITHOUT)
    for target, verdict in training.items():
        assert verdict["impl_loaded"] and verdict["engine_status"] == "applied", verdict
        expected = {"typing.override": "warning"}.get(target, "ok")  # a created name is a warning
        assert verdict["level"] == expected, verdict
    # A C method's signature cannot be read: nothing to compare, said as such, not a warning.
    assert found["torch.Tensor.cuda"]["signature"] == "not compared"
    assert not found["typing.override"]["target_found"]  # Python 3.11: created, as registered


def test_cpu_defaults_are_defaults_and_said_once() -> None:
    """Megatron-LM's parser gets the CPU necessities as defaults; a flag given wins; rank 0 says which it set.
    In the same process, two FlagScale targets answer for the CPU (``arguments`` holds the name
    ``get_device_arch_version`` imported from ``common_utils``: the patch reaches it)."""
    probe = """
import json, sys
keys = sys.argv.pop(1).split(",")
from megatron.training.arguments import parse_args
first = parse_args()
second = parse_args()  # a second parser in the same process: said once
result = {k: getattr(first, k) for k in keys}
# Two FlagScale targets, called as upstream calls them: the device of the exit-signal
# handler's all-gather under --fake-process-group's backend, and the CUDA architecture.
import torch
from torch.testing._internal.distributed.fake_pg import FakeStore
from megatron.training import dist_signal_handler, arguments
torch.distributed.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
for name, call in (("get_device", dist_signal_handler.get_device),
                   ("get_device_arch_version", arguments.get_device_arch_version)):
    try:
        result[name] = str(call())
    except Exception as exc:
        result[name] = type(exc).__name__
print("RESULT" + json.dumps(result))
"""
    names = (
        "distributed_backend,use_cpu_initialization,gradient_accumulation_fusion,apply_rope_fusion,"
        "no_persist_layer_norm,gradient_reduce_div_fusion"
    )

    def parse(*argv: str, **env: str) -> tuple[dict, str]:
        proc = subprocess.run(
            [sys.executable, "-m", "fl_patch", "-c", probe, names, *argv],
            env=_env(**env),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        (line,) = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
        return json.loads(line[len("RESULT") :]), proc.stderr

    args, stderr = parse("--distributed-backend", "nccl")
    assert args == {
        "distributed_backend": "nccl",  # the user's choice wins (and would fail here, as upstream would)
        "use_cpu_initialization": True,
        "gradient_accumulation_fusion": False,
        "apply_rope_fusion": False,
        "no_persist_layer_norm": True,
        "gradient_reduce_div_fusion": False,  # megatron FSDP's PREMUL_SUM: NCCL only
        "get_device": "cpu",  # upstream: RuntimeError for any backend but nccl and gloo
        "get_device_arch_version": "0",  # upstream: torch.cuda.get_device_properties -> AssertionError
    }
    (said,) = [line for line in stderr.splitlines() if ANNOUNCEMENT in line]  # once, for two parsers
    flags = said.split("did not set: ", 1)[1]
    for flag in ("--use-cpu-initialization", "--no-gradient-accumulation-fusion", "--no-rope-fusion"):
        assert flag in flags
    assert "--no-persist-layer-norm" in flags and "CUDA_DEVICE_MAX_CONNECTIONS=1" in flags
    assert "--distributed-backend" not in flags
    _, stderr = parse(RANK="1")
    assert ANNOUNCEMENT not in stderr  # said on rank 0 only
    # FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is not 1 (arguments.py): the pack leaves it unset there
    for fsdp in ("--use-torch-fsdp2", "--use-megatron-fsdp"):
        _, stderr = parse(fsdp)
        (said,) = [line for line in stderr.splitlines() if ANNOUNCEMENT in line]
        assert "CUDA_DEVICE_MAX_CONNECTIONS" not in said and "--no-gradient-reduce-div-fusion" in said, said


# --------------------------------------------------------------------------- training runs
@pytest.mark.slow
def test_one_rank_trains_evaluates_saves_and_resumes_exactly(one_rank: tuple[Run, Path], tmp_path: Path) -> None:
    """``python -m fl_patch script.py``: 8 iterations with evaluation, checkpoints written through
    dist_checkpointing's spawn child (patched too), and a second process resuming from iteration 4
    reproduces iterations 5-8 and the evaluations exactly."""
    first, checkpoints = one_rank
    # The pack said which CPU defaults it set, once; not the one the command line gave.
    said = [line for line in first.stderr.splitlines() if ANNOUNCEMENT in line]
    assert len(said) == 1 and "--use-cpu-initialization" in said[0] and "--distributed-backend" not in said[0]
    # Training: 8 iterations of 2 micro-batches, and the loss falls.
    assert sorted(first.train[0]) == list(range(8)) and all(len(mb) == 2 for mb in first.train[0].values())
    assert sum(first.train[0][7]) / 2 < sum(first.train[0][0]) / 2 - 0.3
    # Evaluation at iterations 4 and 8 (2 iterations x 2 micro-batches), then validation and test sets.
    assert len(first.evals[0]) == 4 * 4
    assert {p.name for p in checkpoints.iterdir()} >= {"iter_0000004", "iter_0000008"}
    # dist_checkpointing's writer child (multiprocessing spawn, re-imports the script) was patched.
    children = [r for r in first.reports if r["pid"] != first.pid]
    assert children, "no exit report from the checkpoint writer's spawn child"
    for report in children:
        status = {r["target"]: r["status"] for r in report["records"]}
        assert status["megatron.training.initialize.torch"] == "applied"
        assert status["typing.override"] == "applied"

    resumed = pretrain(
        tmp_path, "resumed", "--attention-dropout", "0.0", "--load", str(checkpoints), "--ckpt-step", "4"
    )
    assert sorted(resumed.train[0]) == [4, 5, 6, 7]
    assert resumed.losses() == [loss for it in range(4, 8) for loss in first.train[0][it]]
    # Evaluations at 8 and of the validation and test sets: 3 of the first run's 4, identical.
    assert len(resumed.evals[0]) == 12 and resumed.evals[0] == first.evals[0][4:]


@pytest.mark.slow
def test_two_tensor_parallel_ranks_match_one_rank(one_rank: tuple[Run, Path], tmp_path: Path) -> None:
    """TP=2 under torchrun computes the losses of one process, hidden dropout included: the
    weights are the same (CPU initialisation from the seed, not shifted by the "CUDA" warm-up
    draws) and both ranks draw the same hidden-dropout masks, as upstream promises on GPUs.
    This run hands ``pretrain`` a model provider (the ``training.get_model`` path)."""
    first, _ = one_rank
    tp2 = pretrain(
        tmp_path,
        "tp2",
        "--attention-dropout",
        "0.0",
        "--tensor-model-parallel-size",
        "2",
        "--fl-model-provider",
        ranks=2,
    )
    builds = [e for e in tp2.events if e["event"] == "model_build"]
    assert len(builds) == 2 and all(e["rng_as_seeded"] for e in builds), builds
    assert tp2.losses(0) == pytest.approx(first.losses(0), rel=1e-5)
    assert tp2.losses(1) == tp2.losses(0)  # tensor-parallel ranks see the same batch and loss
    assert tp2.evals[0] == pytest.approx(first.evals[0], rel=1e-5)


def test_moe_with_grouped_gemm_on_the_te_spec_trains(tmp_path: Path) -> None:
    """Megatron's defaults for a MoE recipe: the TE layer spec (no TE here), 4 experts top-2,
    the alltoall dispatcher and ``--moe-grouped-gemm``, which ``validate_args`` gates on the
    GPU generation before any model code (``training_torch_names.ARGUMENTS``)."""
    moe = pretrain(
        tmp_path,
        "moe_grouped",
        *("--transformer-impl", "transformer_engine", "--train-iters", "4", "--eval-interval", "4"),
        *("--num-experts", "4", "--moe-router-topk", "2", "--moe-token-dispatcher-type", "alltoall"),
        *("--moe-ffn-hidden-size", "64", "--moe-grouped-gemm", "--normalization", "RMSNorm", "--swiglu"),
        "--disable-bias-linear",
    )
    losses = moe.losses(0)
    assert len(losses) == 4 * 2 and all(math.isfinite(loss) for loss in losses)  # 4 iterations, 2 micro-batches
    assert losses[-1] < losses[0], losses  # it learns
    assert moe.evals[0] and all(math.isfinite(loss) for loss in moe.evals[0])


@pytest.mark.slow
def test_two_data_parallel_ranks_with_the_distributed_optimizer_resume_exactly(tmp_path: Path) -> None:
    """DP=2 with the distributed optimizer (torch Adam: no Apex/TE), attention and hidden dropout on:
    a checkpoint at iteration 4 resumes with exactly the losses of iterations 5-8 on both ranks.
    Needs the pack's three DistributedOptimizer fixes (upstream bugs without Apex/TE, optimizer.py)."""
    checkpoints = tmp_path / "checkpoints"
    common = ["--use-distributed-optimizer"]
    first = pretrain(tmp_path, "dp2", *common, "--save", str(checkpoints), "--save-interval", "4", ranks=2)
    assert sorted(first.train[0]) == list(range(8)) and first.losses(0) != first.losses(1)  # different data
    resumed = pretrain(tmp_path, "dp2-resumed", *common, "--load", str(checkpoints), "--ckpt-step", "4", ranks=2)
    for rank in (0, 1):
        assert resumed.losses(rank) == [loss for it in range(4, 8) for loss in first.train[rank][it]], rank
        evals = len(first.evals[rank]) // 4  # per evaluation; the resumed run misses the one at 4
        assert len(resumed.evals[rank]) == 3 * evals and resumed.evals[rank] == first.evals[rank][evals:], rank
