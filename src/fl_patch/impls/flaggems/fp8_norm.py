"""norm -> linear in fp8: the norm kernel takes the amax the linear's cast of its output needs.

Why: under current scaling (``tensorwise``) an fp8 linear casts its input in two passes over it, one for the amax
and one for the cast (``fp8_quant.quantize_tensorwise``). In a Llama-style layer two of those inputs come straight
from a norm: ``TELayerNormColumnParallelLinear`` normalizes and feeds the QKV projection and fc1. The norm kernel
holds every value it writes in registers, so taking their amax there costs one ``atomic_max`` a tile, and the
linear's amax pass over the tensor goes (the SwiGLU kernels do the same for the MLP's two widest casts:
``fp8_swiglu.py``).

How: the pack replaces ``te.modules.linear_input_norm``, the norm ``TELayerNormColumnParallelLinear`` calls with
itself as the linear the result feeds (not ``te.modules.norm``, whose signature a plugin's own norm keeps). Where that
linear runs its GEMMs in fp8 under ``tensorwise`` in this region, at sizes the fp8 GEMMs take, with the pack's own
norm kernels (``FL_GEMS_BACKEND`` not sending norms to FlagGems) taking the call, the norm kernel also takes the amax
of what it writes (``kernels/norms.py``, ``HAS_AMAX``) and offers it to the linear (:meth:`~.fp8.LinearFp8.offer`);
any other call goes to ``te.modules.norm`` as installed. The linear takes the offer only for the very tensor it was
made from (address, shape, strides, version), else casts as before; the bytes are the same either way (the amax is
taken from the values as stored; checked bit for bit in the interpreter on megatron's TE-spec GPT:
``tests/impls/test_flaggems_fp8.py``).

Not served, and why: ``delayed`` (the scale is known beforehand, so the norm could write the fp8 copy itself, but the
linear's weight-gradient GEMM also needs the copy transposed, which a kernel holding whole rows writes a few bytes at
a time: the cast kernel runs as before); ``blockwise`` (1x128 tiles, their own scales: no per-tensor amax);
sequence parallelism (the linear casts the all-gathered input, another tensor than the norm's output).
``FL_GEMS_FP8_NORM_CAST=0`` turns it off (the bench's control; the same bytes either way).
When to drop: TransformerEngine (or TE-FL) installed; none of the pack's fp8 is registered then.
"""

from __future__ import annotations

import os
import sys

import torch

from ._runtime import backend
from .fp8 import LinearFp8, active_recipe
from .te import norm_reason

__all__ = ["ENABLED", "linear_input_norm", "norm_casting"]

_TE_MODULES = "fl_patch.impls.te.modules"

# decided once at import (the bench's control sets it in the environment; the tests set the attribute)
ENABLED = os.environ.get("FL_GEMS_FP8_NORM_CAST", "1") != "0"


def norm_casting(
    linear: torch.nn.Module, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float, rms: bool
) -> torch.Tensor | None:
    """The norm of ``x`` with the amax of the result set for ``linear``'s fp8 cast of it; None where that does not
    apply (the caller runs the plain norm). ``weight`` is the effective gamma (TE's zero-centred one already added)."""
    if not ENABLED:
        return None
    fp8 = getattr(linear, "_fl_fp8", None)
    recipe = active_recipe()
    if (
        recipe is None
        or recipe.kind != "tensorwise"
        or not isinstance(fp8, LinearFp8)
        or fp8.recipe.kind != "tensorwise"
    ):
        return None
    if getattr(linear, "sequence_parallel", False) or backend("rms_norm" if rms else "layer_norm") == "flaggems":
        return None
    width = x.shape[-1]
    tokens = x.numel() // max(width, 1)
    weight_of_linear = linear.weight
    assert isinstance(weight_of_linear, torch.Tensor)
    if tokens == 0 or fp8.bf16_reason(tokens, weight_of_linear.shape, x.dtype) is not None:
        return None
    from .kernels import norms

    made = fp8.produced_cast("input", tokens, width, x.device, need_t=False)
    assert made is not None  # (tensorwise, one GEMM)
    amax = made.slots[1:2]
    out = norms.rms_norm(x, weight, eps, amax) if rms else norms.layer_norm(x, weight, bias, eps, amax)
    fp8.offer(made, out.view(tokens, width))
    return out


def linear_input_norm(
    linear: torch.nn.Module,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    rms: bool,
    zero_centered_gamma: bool,
) -> torch.Tensor:
    """``te.modules.linear_input_norm``: the norm with the amax ``linear``'s fp8 cast needs, where that applies
    (:func:`norm_casting`); otherwise ``te.modules.norm`` as installed (the pack's, or a plugin's)."""
    if getattr(linear, "_fl_fp8", None) is not None and norm_reason(x, weight, bias) is None:
        gamma = weight + 1 if zero_centered_gamma else weight  # autograd carries the gradient back to weight
        made = norm_casting(linear, x, gamma, bias, eps, rms)
        if made is not None:
            return made
    # the caller's module (loaded: it called this); looked up per call, as its own call of norm would be
    return sys.modules[_TE_MODULES].norm(x, weight, bias, eps, rms, zero_centered_gamma)
