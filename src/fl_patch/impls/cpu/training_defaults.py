"""Command-line defaults that only a CPU needs, set when the user did not set them, and said so.

Megatron-LM's defaults assume a GPU: ``--distributed-backend nccl``, parameters allocated
on the GPU, fused CUDA kernels. On a machine without one, a handful of flags are not
choices but necessities. The CPU pack makes them the defaults of megatron.training's
argument parser, so that ``pretrain_gpt.py`` runs with the user's own command line; a
flag the user passes still wins (``--distributed-backend nccl`` then fails as upstream
would). Rank 0 prints, once, which defaults were applied.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import fl_patch
from fl_patch.impls._compat import warn_if_unverified

__all__ = ["CPU_DEFAULTS", "CPU_ENVIRONMENT", "CpuDefault", "add_megatron_arguments", "user_given"]

warn_if_unverified()

_ADD_ARGUMENTS = "megatron.training.arguments.add_megatron_arguments"


@dataclass(frozen=True)
class CpuDefault:
    """One argparse destination, the value the CPU needs, the flag that says it, and why."""

    dest: str
    value: object
    flag: str
    why: str


CPU_DEFAULTS: tuple[CpuDefault, ...] = (
    CpuDefault(
        "distributed_backend",
        "gloo",
        "--distributed-backend gloo",
        "NCCL needs CUDA; gloo reduces CPU tensors",
    ),
    CpuDefault(
        "use_cpu_initialization",
        True,
        "--use-cpu-initialization",
        "otherwise megatron-core allocates every weight on torch.cuda.current_device() "
        "(tensor_parallel/layers.py line 305, VocabParallelEmbedding first)",
    ),
    CpuDefault(
        "gradient_accumulation_fusion",
        False,
        "--no-gradient-accumulation-fusion",
        "upstream's unfused weight gradient, as verified on the CPU (fl_patch serves Apex's "
        "fused_weight_gradient_mlp_cuda as one addmm_ for megatron-core scripts that set the fusion)",
    ),
    CpuDefault(
        "apply_rope_fusion",
        False,
        "--no-rope-fusion",
        "fused RoPE needs Transformer Engine: TransformerConfig raises with --position-embedding-type rope "
        "(transformer/transformer_config.py line 2185)",
    ),
    CpuDefault(
        "gradient_reduce_div_fusion",
        False,
        "--no-gradient-reduce-div-fusion",
        "megatron FSDP then scales gradients by NCCL's PREMUL_SUM reduction, which gloo refuses "
        "(megatron_fsdp/param_and_grad_buffer.py line 4748: 'Cannot use ReduceOp.PREMUL_SUM with Gloo')",
    ),
    CpuDefault(
        "no_persist_layer_norm",
        True,
        "--no-persist-layer-norm",
        "WrappedTorchNorm, the norm without Apex, asserts it is off (transformer/torch_norm.py line 48)",
    ),
)
"""The defaults the CPU pack gives megatron.training's parser.

Each was checked on megatron-core 0.19.2: with the others given and that one left out,
``pretrain`` fails (``RuntimeError: Distributed package doesn't have NCCL built in``;
``Torch not compiled with CUDA enabled`` in ``tensor_parallel/layers.py``; the
``fused_weight_gradient_mlp_cuda`` ``RuntimeError``; "apply_rope_fusion is not available"
with RoPE; the ``persist_layer_norm`` assertion).
"""

CPU_ENVIRONMENT: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "CUDA_DEVICE_MAX_CONNECTIONS": (
        "1",
        "validate_args requires it for tensor/context parallelism before Blackwell; it means nothing without a GPU",
        # ...and asserts it is not 1 with either FSDP (arguments.py lines 1014 and 1143): left unset there
        ("use_torch_fsdp2", "use_megatron_fsdp"),
    ),
}
"""Environment variables set (when unset) before argument validation: ``name: (value, why, dests)``, not set when
the command line turns on one of ``dests`` (options whose validation wants the variable otherwise)."""

_announced = False


def user_given(parser: argparse.ArgumentParser, dest: str, argv: list[str]) -> bool:
    """Whether ``argv`` names one of the option strings that set ``dest`` (``--flag`` or ``--flag=value``)."""
    options = {option for action in parser._actions if action.dest == dest for option in action.option_strings}
    return any(arg in options or arg.split("=", 1)[0] in options for arg in argv if arg.startswith("-"))


def _announce(applied: list[str]) -> None:
    """The defaults set, once per job (``reporting/notices.py``: rank 0, not repeated by its children)."""
    global _announced
    if _announced or not applied:
        return
    _announced = True
    from fl_patch.reporting.notices import say_once_per_job

    say_once_per_job(
        "cpu_training_defaults",
        "fl_patch CPU pack: no GPU here; megatron.training runs with these defaults, which the command "
        f"line did not set: {' '.join(applied)} (pass a flag to choose otherwise)",
    )


def add_megatron_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Patch for ``megatron.training.arguments.add_megatron_arguments``.

    Why: upstream's parser (``arguments.py`` lines 45-85 and the config dataclasses it reads,
    e.g. ``config/common_config.py`` line 74 ``distributed_backend = "nccl"``) defaults to
    a GPU: NCCL, weights allocated on ``torch.cuda.current_device()``, gradient accumulation
    fused in a CUDA extension, Apex's persistent layer norm. On a CPU each of those stops
    ``pretrain`` (NCCL is not built into a CPU torch; ``validate_args`` asserts the fusion
    extension; the weight allocation raises "Torch not compiled with CUDA enabled").
    How: upstream builds the parser, then the CPU necessities in :data:`CPU_DEFAULTS` become
    its defaults (``parser.set_defaults``), so a flag on the command line still wins; the
    variables in :data:`CPU_ENVIRONMENT` are set when unset. Rank 0 prints once which
    defaults the command line did not set and the pack therefore applied.
    Upstream reference: megatron-core 0.19.2, ``megatron/training/arguments.py``.
    Drop when: upstream chooses its defaults from the accelerator present.
    """
    parser = fl_patch.original(_ADD_ARGUMENTS)(parser)
    argv = sys.argv[1:]
    applied = []
    for default in CPU_DEFAULTS:
        parser.set_defaults(**{default.dest: default.value})
        if not user_given(parser, default.dest, argv):
            applied.append(default.flag)
    for name, (value, _why, unless) in CPU_ENVIRONMENT.items():
        if name not in os.environ and not any(user_given(parser, dest, argv) for dest in unless):
            os.environ[name] = value
            applied.append(f"{name}={value}")
    _announce(applied)
    return parser
