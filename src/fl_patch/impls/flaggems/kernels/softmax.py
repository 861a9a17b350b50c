"""Scale, mask and softmax of attention scores [b, np, sq, sk], forward and backward.

Why: this is upstream's ``FusedScaleMaskSoftmax`` when its CUDA extension is absent
(always, without Apex/TE): ``.float()``, a multiply, ``masked_fill_`` with a freshly
built [sq, sk] causal mask, ``softmax``, ``.bfloat16()``: five passes over a
b*np*sq*sk tensor forward, more backward. It runs when core attention cannot take
the flash path (an explicit mask, say).

How: one program per score row: reads the row once, applies the scale, the mask
(causal computed from indices, or a boolean mask read with broadcast strides) with
upstream's fill value -10000, and writes probabilities in the input dtype. Backward
reads probabilities and their gradient once; masked positions get zero gradient,
as they do through ``masked_fill_``. Arithmetic in fp32 either way.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import next_power_of_2, run

__all__ = ["MAX_KEYS", "ScaledMaskedSoftmaxFunction", "scaled_masked_softmax"]

MAX_KEYS = 32768
MASK_NONE, MASK_CAUSAL, MASK_TENSOR = 0, 1, 2


def _block(keys: int) -> tuple[int, int]:
    block = next_power_of_2(keys)
    return block, 4 if block <= 2048 else 8 if block <= 8192 else 16


@triton.jit
def _masked(MASK, row, H, SQ, stride_mb, stride_mh, stride_mq, stride_mk, cols, cmask, MASK_KIND: tl.constexpr):
    q = row % SQ
    if MASK_KIND == 1:
        masked = cols > q
    elif MASK_KIND == 2:
        bh = row // SQ
        base = MASK + (bh // H) * stride_mb + (bh % H) * stride_mh + q * stride_mq
        masked = tl.load(base + cols * stride_mk, mask=cmask, other=0) != 0
    else:
        masked = cols < 0
    return masked


@triton.jit
def _softmax_fwd(
    X, MASK, Y, H, SQ, SK, stride_xrow, stride_mb, stride_mh, stride_mq, stride_mk, scale,
    MASK_KIND: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    cmask = cols < SK
    x = tl.load(X + row * stride_xrow + cols, mask=cmask, other=0.0).to(tl.float32) * scale
    masked = _masked(MASK, row, H, SQ, stride_mb, stride_mh, stride_mq, stride_mk, cols, cmask, MASK_KIND)
    x = tl.where(masked, -10000.0, x)
    x = tl.where(cmask, x, float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(Y + row * SK + cols, y.to(Y.dtype.element_ty), mask=cmask)


@triton.jit
def _softmax_bwd(
    Y, DY, MASK, DX, H, SQ, SK, stride_dyrow, stride_mb, stride_mh, stride_mq, stride_mk, scale,
    MASK_KIND: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    cmask = cols < SK
    y = tl.load(Y + row * SK + cols, mask=cmask, other=0.0).to(tl.float32)
    dy = tl.load(DY + row * stride_dyrow + cols, mask=cmask, other=0.0).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=0)) * scale
    masked = _masked(MASK, row, H, SQ, stride_mb, stride_mh, stride_mq, stride_mk, cols, cmask, MASK_KIND)
    dx = tl.where(masked, 0.0, dx)
    tl.store(DX + row * SK + cols, dx.to(DX.dtype.element_ty), mask=cmask)


def _mask_strides(mask: torch.Tensor | None, shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    if mask is None:
        return 0, 0, 0, 0
    expanded = mask.expand(shape)
    return expanded.stride(0), expanded.stride(1), expanded.stride(2), expanded.stride(3)


def _score_rows(t: torch.Tensor) -> torch.Tensor:
    flat = t.reshape(-1, t.shape[-1])
    return flat if flat.stride(-1) == 1 else flat.contiguous()


class ScaledMaskedSoftmaxFunction(torch.autograd.Function):
    """softmax(mask(x * scale)) over the last dimension of [b, np, sq, sk] scores."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, mask: torch.Tensor | None, causal: bool, scale: float, out_dtype: torch.dtype
    ) -> torch.Tensor:
        b, h, sq, sk = x.shape
        x2 = _score_rows(x)
        if mask is not None:
            # read as uint8: the kernel loads bytes and compares with 0 (no i1 pointers)
            mask = (mask if mask.dtype == torch.bool else mask.bool()).view(torch.uint8)
        kind = MASK_CAUSAL if causal else MASK_TENSOR if mask is not None else MASK_NONE
        strides = _mask_strides(mask, (b, h, sq, sk))
        y = torch.empty((b, h, sq, sk), dtype=out_dtype, device=x.device)
        block, warps = _block(sk)
        if x2.shape[0] > 0:
            run(
                _softmax_fwd, (x2.shape[0],), x2, mask if mask is not None else x2, y, h, sq, sk, x2.stride(0), *strides, scale,
                MASK_KIND=kind, BLOCK=block, num_warps=warps,
            )  # fmt: skip
        ctx.save_for_backward(y, mask)
        ctx.kind, ctx.scale, ctx.in_dtype = kind, scale, x.dtype
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None]:
        y, mask = ctx.saved_tensors
        b, h, sq, sk = y.shape
        dy2 = _score_rows(dy)
        dx = torch.empty((b, h, sq, sk), dtype=ctx.in_dtype, device=y.device)
        strides = _mask_strides(mask, (b, h, sq, sk))
        block, warps = _block(sk)
        if dy2.shape[0] > 0:
            run(
                _softmax_bwd, (dy2.shape[0],), y, dy2, mask if mask is not None else y, dx, h, sq, sk, dy2.stride(0), *strides, ctx.scale,
                MASK_KIND=ctx.kind, BLOCK=block, num_warps=warps,
            )  # fmt: skip
        return dx, None, None, None, None


def scaled_masked_softmax(
    x: torch.Tensor, mask: torch.Tensor | None, causal: bool, scale: float, out_dtype: torch.dtype
) -> torch.Tensor:
    """Probabilities of scores ``x`` [b, np, sq, sk]: masked entries filled with -10000 after scaling."""
    return ScaledMaskedSoftmaxFunction.apply(x, mask, causal, scale, out_dtype)
