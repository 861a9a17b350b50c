"""RMSNorm and LayerNorm of megatron-core's local spec on the pack's kernels.

Why: without Apex or TE the local spec builds its norms with ``WrappedTorchNorm``,
plain ``torch.nn.RMSNorm`` / ``torch.nn.LayerNorm``, two or more per layer. Eager
``F.rms_norm`` forward+backward moves its bytes at about half the copy bandwidth of
an H200 (docs/gpu_pack.md); a fused kernel does it in one pass each way.

How: ``WrappedTorchNorm`` is replaced by a subclass whose ``__new__`` lets upstream
build the module exactly as before (its config asserts, its choice of class, its
parameters and their dtype), then retypes the module to a subclass of that torch
class which only overrides ``forward``. Parameters, ``state_dict`` keys,
``isinstance(m, torch.nn.RMSNorm)`` and checkpoints are unchanged. ``forward``
takes the kernel (``ops.rms_norm`` / ``ops.layer_norm``) and hands any call it does
not cover back to torch's own forward, saying why once: input not on CUDA or triton
missing, a dtype other than fp32/bf16/fp16, input and weight of different dtypes,
no affine weight, a multi-dimensional ``normalized_shape``, a row wider than
``MAX_WIDTH``. Tensor parallelism does not matter: norms act on full hidden rows.
Sequence parallelism, which upstream's builder refuses for torch's norms, is taken
(the class docstring says how).

Upstream reference: megatron-core 0.19.2 ``megatron/core/transformer/torch_norm.py``
(``WrappedTorchNorm``), chosen by ``megatron/core/models/backends.py``
``LocalSpecProvider.layer_norm``.
When to drop: when torch's eager RMSNorm/LayerNorm reach the copy bandwidth, or
megatron's local spec uses a fused norm on GPUs without Apex/TE.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from megatron.core.transformer.torch_norm import WrappedTorchNorm as _UpstreamWrappedTorchNorm

from . import ops
from ._runtime import fallback, kernel_unavailable, note_config

__all__ = ["MAX_WIDTH", "FlagGemsLayerNorm", "FlagGemsRMSNorm", "WrappedTorchNorm"]

MAX_WIDTH = 32768  # kernels/norms.py MAX_WIDTH (not imported: that module imports triton)
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _unsupported(module: torch.nn.RMSNorm | torch.nn.LayerNorm, x: torch.Tensor) -> str | None:
    weight = getattr(module, "weight", None)
    if weight is None:
        return "no affine weight (elementwise_affine=False)"
    if len(module.normalized_shape) != 1:
        return f"normalized_shape {tuple(module.normalized_shape)} has more than one dimension"
    if x.dtype not in _DTYPES:
        return f"dtype {x.dtype}"
    if x.dtype != weight.dtype:
        return f"input {x.dtype} with weight {weight.dtype}"
    if x.shape[-1] > MAX_WIDTH:
        return f"hidden size {x.shape[-1]} > {MAX_WIDTH}"
    return kernel_unavailable(x, weight)


class FlagGemsRMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` whose forward runs the pack's RMSNorm kernel where it can."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        reason = _unsupported(self, x)
        if reason is not None:
            fallback("rms_norm", reason)
            return super().forward(x)
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return ops.rms_norm(x, self.weight, eps)


class FlagGemsLayerNorm(torch.nn.LayerNorm):
    """``torch.nn.LayerNorm`` whose forward runs the pack's LayerNorm kernel where it can."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        reason = _unsupported(self, x)
        if reason is None and self.bias is not None and self.bias.dtype != x.dtype:
            reason = f"input {x.dtype} with bias {self.bias.dtype}"
        if reason is not None:
            fallback("layer_norm", reason)
            return super().forward(x)
        return ops.layer_norm(x, self.weight, self.bias, self.eps)


_RETYPE: dict[type, type] = {torch.nn.RMSNorm: FlagGemsRMSNorm, torch.nn.LayerNorm: FlagGemsLayerNorm}


class WrappedTorchNorm(_UpstreamWrappedTorchNorm):
    """Upstream's ``WrappedTorchNorm``; the module it builds runs the pack's kernels.

    Sequence parallelism, which upstream's builder refuses for torch's norms, is taken:
    a norm acts on whole hidden rows, so a rank holding a slice of the sequence
    normalizes its rows exactly as a rank holding all of them would; only the weight
    (and bias) gradients are partial sums over the rank's rows. The module is built as
    upstream builds it for ``sequence_parallel=False`` and its parameters are marked
    ``sequence_parallel``, the attribute megatron's fused and TE norms set, on which
    ``finalize_model_grads`` all-reduces those gradients over the tensor-parallel group.
    """

    # Upstream's signature, spelled out (not *args): fl_patch checks that an impl takes every call its target
    # takes, and TE-spec code binds this class under other names (transformer_block.LayerNormImpl) whose
    # replacements are checked against it. Not an instance of this class: the torch norm it builds.
    def __new__(  # type: ignore[misc]
        cls,
        config: Any,
        hidden_size: int,
        eps: float = 1e-5,
        persist_layer_norm: bool = False,
        zero_centered_gamma: bool = False,
        normalization: str = "LayerNorm",
    ) -> torch.nn.Module:
        note_config(config)
        sequence_parallel = bool(getattr(config, "sequence_parallel", False))
        rest = (hidden_size, eps, persist_layer_norm, zero_centered_gamma, normalization)
        built_config = config
        if sequence_parallel:
            built_config = copy.copy(config)
            built_config.sequence_parallel = False
        module = _UpstreamWrappedTorchNorm.__new__(cls, built_config, *rest)
        retyped = _RETYPE.get(type(module))
        if retyped is None:
            if sequence_parallel:  # not a norm the pack serves: upstream's own refusal
                return _UpstreamWrappedTorchNorm.__new__(cls, config, *rest)
            return module
        module.__class__ = retyped
        if sequence_parallel:
            for param in module.parameters():
                param.sequence_parallel = True
        return module
