"""SwiGLU: out = silu(a + bias_a) * (g + bias_g) for the two halves [a | g] of the last dimension.

Why: upstream's local-spec MLP computes ``F.silu(x_glu) * x_linear`` from
``torch.chunk`` views, two kernels and a bf16 intermediate forward, more backward.
Here forward reads the fc1 output once and writes the half-width output once;
backward reads the fc1 output and the output gradient once and writes the
full-width input gradient once.

How: a 2-D grid (row, column block); the gate and linear halves are read at
``col`` and ``F + col`` of the same row, so the fc1 output is used where it lies.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import rows

__all__ = ["SwiGLUFunction", "swiglu"]


def _block(width: int) -> tuple[int, int]:
    block = min(2048, triton.next_power_of_2(width))
    return block, 4 if block <= 1024 else 8


@triton.jit
def _swiglu_fwd(
    Y, BIAS, OUT, F, stride_y, stride_out,
    HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < F
    a = tl.load(Y + row * stride_y + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(Y + row * stride_y + F + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        a += tl.load(BIAS + cols, mask=mask, other=0.0).to(tl.float32)
        g += tl.load(BIAS + F + cols, mask=mask, other=0.0).to(tl.float32)
    out = a * tl.sigmoid(a) * g
    tl.store(OUT + row * stride_out + cols, out.to(OUT.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd(
    Y, BIAS, DOUT, DY, F, stride_y, stride_dout, stride_dy,
    HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < F
    a = tl.load(Y + row * stride_y + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(Y + row * stride_y + F + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        a += tl.load(BIAS + cols, mask=mask, other=0.0).to(tl.float32)
        g += tl.load(BIAS + F + cols, mask=mask, other=0.0).to(tl.float32)
    dout = tl.load(DOUT + row * stride_dout + cols, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(a)
    da = dout * g * sig * (1.0 + a * (1.0 - sig))
    dg = dout * a * sig
    tl.store(DY + row * stride_dy + cols, da.to(DY.dtype.element_ty), mask=mask)
    tl.store(DY + row * stride_dy + F + cols, dg.to(DY.dtype.element_ty), mask=mask)


class SwiGLUFunction(torch.autograd.Function):
    """SwiGLU over the last dimension of ``y`` (width 2F), optional bias of width 2F."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        width = y.shape[-1]
        half = width // 2
        y2 = rows(y, width)
        m = y2.shape[0]
        out = torch.empty((*y.shape[:-1], half), dtype=y.dtype, device=y.device)
        block, warps = _block(half)
        if m > 0 and half > 0:
            _swiglu_fwd[(m, triton.cdiv(half, block))](
                y2, bias if bias is not None else y2, out, half, y2.stride(0), half,
                HAS_BIAS=bias is not None, BLOCK=block, num_warps=warps,
            )  # fmt: skip
        ctx.save_for_backward(y2, bias)
        ctx.y_shape = y.shape
        return out

    @staticmethod
    def backward(ctx, dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        y2, bias = ctx.saved_tensors
        m, width = y2.shape
        half = width // 2
        dout2 = rows(dout, half)
        dy = torch.empty((m, width), dtype=y2.dtype, device=y2.device)
        block, warps = _block(half)
        if m > 0 and half > 0:
            _swiglu_bwd[(m, triton.cdiv(half, block))](
                y2, bias if bias is not None else y2, dout2, dy, half, y2.stride(0), dout2.stride(0), width,
                HAS_BIAS=bias is not None, BLOCK=block, num_warps=warps,
            )  # fmt: skip
        dbias = dy.sum(0, dtype=torch.float32).to(bias.dtype) if bias is not None and ctx.needs_input_grad[1] else None
        return dy.view(ctx.y_shape), dbias


def swiglu(y: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """silu(first half + bias) * (second half + bias) over the last dimension of ``y``."""
    return SwiGLUFunction.apply(y, bias)
