"""SwiGLU: out = silu(a + bias_a) * (g + bias_g) for the two halves [a | g] of the last dimension.

Why: upstream's local-spec MLP computes ``F.silu(x_glu) * x_linear`` from
``torch.chunk`` views, two kernels and a bf16 intermediate forward, more backward.
Here forward reads the fc1 output once and writes the half-width output once;
backward reads the fc1 output and the output gradient once and writes the
full-width input gradient once.

How: a 2-D grid of [BLOCK_M rows, BLOCK_F columns] tiles; the gate and linear
halves are read at ``col`` and ``F + col`` of the same row, so the fc1 output is
used where it lies. Tile shape and warps are autotuned per width
(``FL_GEMS_AUTOTUNE=0``: one row by up to 2048 columns).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import cdiv, launch, next_power_of_2, rows

__all__ = ["SwiGLUFunction", "swiglu"]


_CONFIGS = [
    triton.Config({"BLOCK_M": m, "BLOCK_F": f}, num_warps=w)
    for m, f, w in ((1, 2048, 8), (1, 1024, 4), (2, 1024, 4), (4, 512, 4), (4, 1024, 8), (8, 256, 4), (8, 512, 8))
]
_KEY = ["F", "M_BUCKET"]


def _default(half: int) -> dict:
    block = min(2048, next_power_of_2(half))
    return {"BLOCK_M": 1, "BLOCK_F": block, "num_warps": 4 if block <= 1024 else 8}


def _grid(m: int, half: int):
    return lambda meta: (cdiv(m, meta["BLOCK_M"]), cdiv(half, meta["BLOCK_F"]))


@triton.jit
def _halves(Y, BIAS, rows_, cols, mask, F, stride_y, HAS_BIAS: tl.constexpr):
    """The gate and linear halves (fp32, fc1's bias added) at ``rows_`` and ``cols`` of each half of ``Y``."""
    src = Y + rows_[:, None] * stride_y + cols[None, :]
    a = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(src + F, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        a += tl.load(BIAS + cols, mask=cols < F, other=0.0).to(tl.float32)[None, :]
        g += tl.load(BIAS + F + cols, mask=cols < F, other=0.0).to(tl.float32)[None, :]
    return a, g


@triton.jit
def _swiglu_fwd(
    Y, BIAS, OUT, M, F, stride_y, stride_out, M_BUCKET,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    rows_ = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask = (rows_ < M)[:, None] & (cols < F)[None, :]
    a, g = _halves(Y, BIAS, rows_, cols, mask, F, stride_y, HAS_BIAS)
    out = a * tl.sigmoid(a) * g
    tl.store(OUT + rows_[:, None] * stride_out + cols[None, :], out.to(OUT.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd(
    Y, BIAS, DOUT, DY, M, F, stride_y, stride_dout, stride_dy, M_BUCKET,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    rows_ = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask = (rows_ < M)[:, None] & (cols < F)[None, :]
    a, g = _halves(Y, BIAS, rows_, cols, mask, F, stride_y, HAS_BIAS)
    dout = tl.load(DOUT + rows_[:, None] * stride_dout + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(a)
    da = dout * g * sig * (1.0 + a * (1.0 - sig))
    dg = dout * a * sig
    dst = DY + rows_[:, None] * stride_dy + cols[None, :]
    tl.store(dst, da.to(DY.dtype.element_ty), mask=mask)
    tl.store(dst + F, dg.to(DY.dtype.element_ty), mask=mask)


_FWD = triton.autotune(_CONFIGS, key=_KEY)(_swiglu_fwd)
_BWD = triton.autotune(_CONFIGS, key=_KEY)(_swiglu_bwd)


class SwiGLUFunction(torch.autograd.Function):
    """SwiGLU over the last dimension of ``y`` (width 2F), optional bias of width 2F."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        width = y.shape[-1]
        half = width // 2
        y2 = rows(y, width)
        m = y2.shape[0]
        out = torch.empty((*y.shape[:-1], half), dtype=y.dtype, device=y.device)
        if m > 0 and half > 0:
            launch(
                _swiglu_fwd, _FWD, _grid(m, half), _default(half),
                y2, bias if bias is not None else y2, out, m, half, y2.stride(0), half, next_power_of_2(m),
                HAS_BIAS=bias is not None,
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
        if m > 0 and half > 0:
            launch(
                _swiglu_bwd, _BWD, _grid(m, half), _default(half),
                y2, bias if bias is not None else y2, dout2, dy, m, half, y2.stride(0), dout2.stride(0), width,
                next_power_of_2(m), HAS_BIAS=bias is not None,
            )  # fmt: skip
        dbias = dy.sum(0, dtype=torch.float32).to(bias.dtype) if bias is not None and ctx.needs_input_grad[1] else None
        return dy.view(ctx.y_shape), dbias


def swiglu(y: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """silu(first half + bias) * (second half + bias) over the last dimension of ``y``."""
    return SwiGLUFunction.apply(y, bias)
