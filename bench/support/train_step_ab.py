"""The main job's training step, patched and unpatched, interleaved in one process.

Run under ``python -m fl_patch`` with ``FL_PATCH_REGISTRY=identical_copies_registry``:
the engine installs identical copies of four hot methods. This script builds the model,
optimizer and data of ``examples/train_gpt.py`` once, then times blocks of steps with
the engine's copies in place ("patched") and with the upstream methods put back
("unpatched"), alternating which comes first, and prints the per-step medians as JSON.
Runs in separate processes differ by +-10% on this machine, which would hide a 1% cost.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from identical_copies_registry import TARGETS
from megatron.core import tensor_parallel
from megatron.core.distributed import finalize_model_grads
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func

import fl_patch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_gpt  # the main job's own builders (examples/ is on sys.path above)


def _owner(target: str) -> tuple[type, str]:
    module_name, class_name, attr = target.rsplit(".", 2)
    return getattr(importlib.import_module(module_name), class_name), attr


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--steps-per-block", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--control", action="store_true", help="A/A: both variants upstream (the noise floor)")
    options = parser.parse_args()
    total = options.warmup + 2 * options.blocks * options.steps_per_block
    args = train_gpt.parse_args(["--steps", str(total), "--dropout", "0.1"])
    device = train_gpt.init_distributed(args.tp)
    tensor_parallel.model_parallel_cuda_manual_seed(args.seed)
    model, config = train_gpt.build_model(args, device)
    optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=args.lr, clip_grad=1.0), [model])
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
    config.no_sync_func = model.no_sync
    data = train_gpt.micro_batches(train_gpt.build_dataset(args), args, 0, device)
    forward_backward = get_forward_backward_func()

    states = {"patched": {}, "unpatched": {}}
    for target in TARGETS.values():
        owner, name = _owner(target)
        states["patched"][(owner, name)] = vars(owner)[name]
        states["unpatched"][(owner, name)] = fl_patch.original(target)
        assert states["patched"][(owner, name)] is not states["unpatched"][(owner, name)], target
    if options.control:
        states["patched"] = dict(states["unpatched"])

    def use(variant: str) -> None:
        for (owner, name), value in states[variant].items():
            setattr(owner, name, value)

    def step() -> float:
        start = time.perf_counter()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        forward_backward(
            forward_step_func=train_gpt.forward_step,
            data_iterator=data,
            model=[model],
            num_microbatches=args.num_microbatches,
            seq_length=args.seq_length,
            micro_batch_size=args.micro_batch_size,
            forward_only=False,
        )
        optimizer.step()
        return time.perf_counter() - start

    for _ in range(options.warmup):
        step()
    times: dict[str, list[float]] = {"patched": [], "unpatched": []}
    for block in range(options.blocks):
        order = ("patched", "unpatched") if block % 2 == 0 else ("unpatched", "patched")
        for variant in order:
            use(variant)
            times[variant] += [step() for _ in range(options.steps_per_block)]
    use("patched")
    medians = {variant: statistics.median(values) for variant, values in times.items()}
    tokens = args.micro_batch_size * args.num_microbatches * args.seq_length
    print(
        "RESULT"
        + json.dumps(
            {
                "median_step_s": medians,
                "tokens_per_s": {variant: tokens / value for variant, value in medians.items()},
                "patched_over_unpatched_step_time": medians["patched"] / medians["unpatched"],
                "steps_each": len(times["patched"]),
                "threads": torch.get_num_threads(),
            }
        )
    )
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
