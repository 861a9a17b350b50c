"""A real megatron-core training run for the FlagScale drop-in tests (no fl_patch import).

GPTModel (local spec) + megatron DDP + get_megatron_optimizer in fp16 (so the grad
scaler unscales and checks for inf: ``_unscale_main_grads_and_check_for_nan``) with
gradient clipping (so ``get_grad_norm_fp32`` runs) + ``OptimizerParamScheduler``.
Each rank writes what happened at each step to ``<out>.rank<N>.json``:

* ``grad_norm``: what the optimizer reported;
* ``local_sq``: this rank's own sum of squared main grads (for a hand computation);
* ``found_inf``: whether the step was skipped; ``lr``: the scheduler's lr;
* ``loss``; and which plugin functions ran (``plugin_calls``: since the process started).

``--groups two`` makes the optimizer's grad-stats group a list of two process groups
(both spanning every rank), which upstream cannot take; ``--inject-inf-step K`` puts
an inf into rank 0's gradients at step K only.

``--precision fp16,fp32,bf16`` trains once per precision, one after the other in this process
(the environment, hence fl_patch's activation, is the same for all: one interpreter start and
one megatron import for all of them), each from a fresh model, optimizer, scheduler, model-parallel
state and the same RNG state, and writes ``<out>.<precision>.rank<N>.json``; one precision writes
``<out>.rank<N>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.module import Float16Module

SEQ, VOCAB, MBS = 32, 64, 2


def _code_module(function: object) -> str | None:
    """``megatron.plugin.optimizer.clip_grads`` for a function whose code is in that module's file."""
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    parts = os.path.splitext(code.co_filename)[0].split(os.sep)
    return ".".join(parts[-4:])


_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _precisions(text: str) -> list[str]:
    names = text.split(",")
    if any(name not in _DTYPES for name in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a comma-separated list of distinct {'/'.join(_DTYPES)}: {text!r}")
    return names


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--groups", choices=("one", "two"), default="one")
    p.add_argument("--inject-inf-step", type=int, default=-1)
    p.add_argument("--out", required=True)
    p.add_argument("--precision", type=_precisions, default=["fp16"])
    args = p.parse_args()

    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    rank = dist.get_rank()
    seed = torch.initial_seed()
    for precision in args.precision:
        torch.default_generator.manual_seed(seed)  # each run starts from the state the first one had
        result = train(args, precision, rank)
        out = args.out if len(args.precision) == 1 else f"{args.out}.{precision}"
        with open(f"{out}.rank{rank}.json", "w") as fh:
            json.dump(result, fh)
        parallel_state.destroy_model_parallel()
    dist.barrier()
    dist.destroy_process_group()


def train(args: argparse.Namespace, precision: str, rank: int) -> dict:
    """One training run in ``precision``; what happened at each step and which impls ran."""
    fp16, bf16 = precision == "fp16", precision == "bf16"
    dtype = _DTYPES[precision]
    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(1234)

    config = TransformerConfig(
        num_layers=1,  # every override runs once per step whatever the depth: one layer is enough
        hidden_size=32,
        num_attention_heads=4,
        use_cpu_initialization=True,
        fp16=fp16,
        bf16=bf16,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        gradient_accumulation_fusion=False,
    )
    gpt = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=VOCAB,
        max_sequence_length=SEQ,
        position_embedding_type="rope",
    )
    model = DistributedDataParallel(
        config=config,
        module=Float16Module(config, gpt) if fp16 or bf16 else gpt,
        ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True),
    )
    optimizer = get_megatron_optimizer(
        OptimizerConfig(
            optimizer="adam",
            lr=1e-2,
            min_lr=1e-4,
            fp16=fp16,
            bf16=bf16,
            params_dtype=dtype,
            clip_grad=1e9,
            initial_loss_scale=2.0**10 if fp16 else None,
            hysteresis=1,
        ),
        [model],
    )
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=0.0,
        max_lr=1e-2,
        min_lr=1e-4,
        lr_warmup_steps=2,
        lr_decay_steps=args.steps,
        lr_decay_style="cosine",
        start_wd=0.0,
        end_wd=0.0,
        wd_incr_steps=args.steps,
        wd_incr_style="constant",
    )
    inner = optimizer.chained_optimizers[0] if hasattr(optimizer, "chained_optimizers") else optimizer
    if args.groups == "two":
        inner.grad_stats_parallel_group = [
            dist.new_group(list(range(dist.get_world_size()))),
            dist.new_group(list(range(dist.get_world_size()))),
        ]

    generator = torch.Generator().manual_seed(99 + parallel_state.get_data_parallel_rank())

    def batches():
        while True:
            tokens = torch.randint(0, VOCAB, (MBS, SEQ + 1), generator=generator)
            yield tokens

    def forward_step(data_iterator, model):
        tokens = next(data_iterator)
        positions = torch.arange(SEQ).expand(MBS, -1)
        output = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:])

        def loss_func(output_tensor):
            loss = output_tensor.float().mean()
            return loss, {"lm loss": loss.detach()}

        return output, loss_func

    forward_backward = get_forward_backward_func()
    data = batches()
    steps = []
    for step in range(1, args.steps + 1):
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(
            forward_step_func=forward_step,
            data_iterator=data,
            model=[model],
            num_microbatches=1,
            seq_length=SEQ,
            micro_batch_size=MBS,
            forward_only=False,
        )
        if step == args.inject_inf_step and rank == 0:
            next(iter(p for p in model.parameters() if p.requires_grad)).main_grad[0] = float("inf")
        params_before = [p.detach().clone() for p in model.parameters()]
        # The optimizer inside the ChainedOptimizer that get_megatron_optimizer returns: upstream's
        # ChainedOptimizer puts grad-stats groups in a set, which a list of groups cannot enter.
        update_successful, grad_norm, _ = inner.step()
        # This rank's own squared norm of the grads the optimizer normed (fp32 main grads,
        # unscaled; clip_grad is too large to rescale them), before any reduction.
        local_sq = sum(float(g.double().pow(2).sum()) for g in inner.get_grads_for_grad_norm())
        scheduler.step(1)
        unchanged = all(torch.equal(a, b) for a, b in zip(params_before, model.parameters(), strict=True))
        steps.append(
            {
                "step": step,
                "loss": float(losses[0]["lm loss"]),
                "grad_norm": grad_norm,
                "found_inf": not update_successful,
                "params_unchanged": unchanged,
                "local_sq": local_sq,
                "lr": optimizer.param_groups[0]["lr"],
                "loss_scale": float(inner.get_loss_scale()),
                "has_grad_norm_group_impl": _code_module(type(inner).has_grad_norm_group),
            }
        )
    plugin_calls = {}
    clip_grads_plugin = sys.modules.get("megatron.plugin.optimizer.clip_grads")
    if clip_grads_plugin is not None:
        plugin_calls["musa"] = len(clip_grads_plugin.MUSA_CALLS)
    return {
        "rank": rank,
        "world_size": dist.get_world_size(),
        "steps": steps,
        "plugin_calls": plugin_calls,
        "scheduler_class": f"{type(scheduler).__module__}.{type(scheduler).__qualname__}",
        # A replaced class builds the impl (a subclass of upstream's); the impl is first in its MRO.
        "scheduler_mro": [f"{c.__module__}.{c.__qualname__}" for c in type(scheduler).__mro__],
        # The upstream class is the first base defined in megatron.core (or the class itself).
        "isinstance_upstream": isinstance(
            scheduler,
            next(c for c in type(scheduler).__mro__ if c.__module__ == "megatron.core.optimizer_param_scheduler"),
        ),
        # The module whose code runs (an installed function wears upstream's name and module).
        "grad_norm_impl": _code_module(sys.modules["megatron.core.optimizer.optimizer"].get_grad_norm_fp32),
        "unscale_impl": _code_module(getattr(type(inner), "_unscale_main_grads_and_check_for_nan", None)),
    }


if __name__ == "__main__":
    main()
