"""fc1 -> SwiGLU -> fc2 in fp8: the SwiGLU kernels make the fp8 casts of the two tensors they write.

Why: in an fp8 MLP the SwiGLU output is fc2's input and the SwiGLU backward's output is fc1's output gradient;
each is then cast for an fp8 GEMM (``fp8.LinearFp8.quantize_input`` / ``quantize_grad``), which reads the whole
tensor again, twice under current scaling (amax, then cast). They are the MLP's widest tensors, about half the
bytes of every cast in a Llama-style layer. Measured on an H200, the casts kept the 1.31B's fp8 step at 1.24-1.28x
the bf16 step (docs/gpu_pack.md); this takes their re-reading away.

How: where the pack serves ``MLP.forward`` (``mlp.py``) and both linears around the SwiGLU run their GEMMs in fp8 (an
fp8 region, ``tensorwise`` or ``delayed``, sizes the fp8 GEMMs take, fc1's output computed by the pack's fp8 GEMM),
the SwiGLU runs on ``kernels/swiglu_fp8.py``: forward, it asks fc2's :class:`~.fp8.LinearFp8` what to make
(:meth:`~.fp8.LinearFp8.produced_cast`: the amax for current scaling, the fp8 copies at fc2's scale for delayed),
makes it while writing the output and offers it to fc2 (:meth:`~.fp8.LinearFp8.offer`); backward, the same for fc1's
output gradient. The layer takes an offer only for the very tensor it was made from (address, shape, strides,
version; the offer holds the tensor), else it casts as usual; what it computes is the same bytes either way (the
kernels round to the output dtype first, then take amax and fp8 bytes as the cast kernel would: checked bit for bit
in the interpreter, and a whole megatron step with and without, ``tests/impls/test_flaggems_fp8.py``).

Which recipes: ``FL_GEMS_FP8_SWIGLU_CAST``, a comma list of recipes, default ``tensorwise``; ``0`` (or empty) for none.
Measured on the 1.31B (docs/gpu_pack.md, "The SwiGLU kernels make the MLP's casts"): under ``tensorwise`` the amax
pass goes (kernel time -26 ms a step of 4 micro-batches on an H100, step -10 to -26 ms on two H200s); under
``delayed`` the fused kernel that writes the output, the fp8 copy and its transpose ran no faster than the SwiGLU
kernel and the cast kernel apart (kernel time +4 ms, step +10 to +15 ms on the H200s), so it is not the default there
(``FL_GEMS_FP8_SWIGLU_CAST=tensorwise,delayed`` turns it on: the same bytes either way).

Not served: ``blockwise`` (1x128 tiles: the SwiGLU tile would have to own whole 128-column groups and the transposed
copy's 128-row groups), MoE experts (grouped linears), and a SwiGLU whose fc1 or fc2 runs bf16.
When to drop: TransformerEngine (or TE-FL) installed; none of the pack's fp8 is registered then.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .fp8 import LinearFp8, active_recipe, producer

__all__ = ["ENABLED", "swiglu_casting"]

_KINDS = ("tensorwise", "delayed")


def _recipes(text: str) -> frozenset[str]:
    """The recipes ``FL_GEMS_FP8_SWIGLU_CAST`` names (``0`` or empty: none); anything else is refused by name."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if names in ([], ["0"]):
        return frozenset()
    unknown = [n for n in names if n not in _KINDS]
    if unknown:
        raise ValueError(
            f"FL_GEMS_FP8_SWIGLU_CAST={text!r}: {', '.join(map(repr, unknown))} is no recipe the SwiGLU kernels cast for "
            f"(served: {', '.join(_KINDS)}; 0 for none)"
        )
    return frozenset(names)


# the recipes whose casts the SwiGLU kernels make (decided once at import; the tests and the bench set it)
ENABLED: set[str] = set(_recipes(os.environ.get("FL_GEMS_FP8_SWIGLU_CAST", "tensorwise")))
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def swiglu_casting(mlp: Any, intermediate: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """The SwiGLU of fc1's output ``intermediate`` with fc2's input cast and fc1's output-gradient cast made by its
    kernels; None where that does not apply (the caller runs the plain SwiGLU)."""
    if not ENABLED:
        return None
    recipe = active_recipe()
    if recipe is None or recipe.kind not in ENABLED or intermediate.dtype not in _DTYPES:
        return None
    fc1 = producer(intermediate)  # None under no_grad (a forward without backward: only fc2's cast is made)
    fc2 = getattr(mlp.linear_fc2, "_fl_fp8", None)
    if (fc1 is None and intermediate.requires_grad) or not isinstance(fc2, LinearFp8) or fc2.recipe.kind != recipe.kind:
        return None
    width = intermediate.shape[-1]
    tokens = intermediate.numel() // max(width, 1)
    fc2_weight = mlp.linear_fc2.weight
    if width % 2 or fc2.bf16_reason(tokens, fc2_weight.shape, intermediate.dtype) is not None:
        return None
    if bias is not None and (bias.dtype != intermediate.dtype or bias.shape[-1] != width):
        return None
    # whether each linear's weight gradient is an fp8 GEMM (its cast then writes the transposed copy too); a bool, not
    # the weight: a weight passed in would be an input of this autograd node, an edge into its gradient accumulator
    grads = torch.is_grad_enabled()
    fc2_t = grads and fc2_weight.requires_grad and fc2.recipe.wgrad
    fc1_t = fc1 is not None and grads and mlp.linear_fc1.weight.requires_grad and fc1.recipe.wgrad
    return _SwiGLUCasting.apply(intermediate, bias, fc1, fc2, fc2_t, fc1_t)


class _SwiGLUCasting(torch.autograd.Function):
    """SwiGLU forward making fc2's input cast, backward making fc1's output-gradient cast."""

    @staticmethod
    def forward(
        ctx: Any,
        y: torch.Tensor,
        bias: torch.Tensor | None,
        fc1: LinearFp8 | None,
        fc2: LinearFp8,
        fc2_t: bool,
        fc1_t: bool,
    ) -> torch.Tensor:
        from .kernels import rows, swiglu_fp8

        width = y.shape[-1]
        half = width // 2
        y2 = rows(y, width)
        m = y2.shape[0]
        out = torch.empty((*y.shape[:-1], half), dtype=y.dtype, device=y.device)
        out2 = out.view(m, half)
        made = fc2.produced_cast("input", m, half, y.device, fc2_t)
        assert made is not None  # (tensorwise or delayed, one GEMM: checked by swiglu_casting)
        swiglu_fp8.forward(
            y2, bias, out2, dtype=made.dtype, amax=made.slots[1:2], scale=made.scale, scale_inv=made.slots[0:1],
            q=made.q, qt=made.qt,
        )  # fmt: skip
        fc2.offer(made, out2)
        ctx.save_for_backward(y2, bias)
        ctx.fc1, ctx.fc1_t, ctx.y_shape = fc1, fc1_t, y.shape
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[Any, ...]:
        from .kernels import rows, swiglu_fp8

        y2, bias = ctx.saved_tensors
        fc1: LinearFp8 = ctx.fc1  # (not None: a backward runs only where fc1's fp8 GEMM made the input)
        m, width = y2.shape
        dout2 = rows(dout, width // 2)
        dy = torch.empty((m, width), dtype=y2.dtype, device=y2.device)
        made = fc1.produced_cast("grad", m, width, dy.device, ctx.fc1_t)
        assert made is not None
        swiglu_fp8.backward(
            y2, bias, dout2, dy, dtype=made.dtype, amax=made.slots[1:2], scale=made.scale, scale_inv=made.slots[0:1],
            q=made.q, qt=made.qt,
        )  # fmt: skip
        fc1.offer(made, dy)
        dbias = dy.sum(0, dtype=torch.float32).to(bias.dtype) if bias is not None and ctx.needs_input_grad[1] else None
        ctx.fc1 = None
        return dy.view(ctx.y_shape), dbias, None, None, None, None
