"""Rotary position embedding on [s, b, h, d] tensors, forward and backward.

Why: upstream's unfused path (``_apply_rotary_pos_emb_bshd``) computes cos and sin
of the frequencies, rotate-half (a ``torch.cat`` of negated halves), two products,
a sum and a final ``torch.cat``: about eight kernels and their intermediates per
call, twice a layer (query and key), and autograd replays it backward.

How: one program per position rotates every (batch, head) row of that position
(split in tiles of up to 4096 pairs when more): it computes cos/sin of the fp32
frequencies once, in registers (no cos/sin tensors), for all of them, reads
the query or key where it lies (a strided slice of the fused QKV output) and writes
a contiguous result; the dimensions past the rotary width pass through. Backward is
the same kernel with the rotation's transpose (sin negated on the other side).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import launch

__all__ = ["RotaryFunction", "rotary"]


@triton.jit
def _rope(
    T, FREQ, OUT, BH, H, D, ROT_HALF, stride_ts, stride_tb, stride_th, stride_fs, mscale,
    BACKWARD: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_BH: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr, HAS_PASS: tl.constexpr,
):  # fmt: skip
    s = tl.program_id(0).to(tl.int64)
    r = tl.program_id(1) * BLOCK_BH + tl.arange(0, BLOCK_BH)  # rows of the flattened (batch, head) plane
    rmask = r < BH
    i = tl.arange(0, BLOCK_R)
    imask = i < ROT_HALF
    if INTERLEAVED:
        e1 = 2 * i
        e2 = 2 * i + 1
    else:
        e1 = i
        e2 = i + ROT_HALF
    # The angles of this position, once for every (batch, head) row of the tile.
    f1 = tl.load(FREQ + s * stride_fs + e1, mask=imask, other=0.0).to(tl.float32)
    f2 = tl.load(FREQ + s * stride_fs + e2, mask=imask, other=0.0).to(tl.float32)
    c1 = tl.cos(f1) * mscale
    s1 = tl.sin(f1) * mscale
    c2 = tl.cos(f2) * mscale
    s2 = tl.sin(f2) * mscale
    b = (r // H).to(tl.int64)
    h = (r % H).to(tl.int64)
    src = T + (s * stride_ts + b * stride_tb + h * stride_th)[:, None]
    dst = OUT + ((s * BH + r) * D)[:, None]
    mask = rmask[:, None] & imask[None, :]
    x1 = tl.load(src + e1[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + e2[None, :], mask=mask, other=0.0).to(tl.float32)
    if BACKWARD:
        y1 = x1 * c1[None, :] + x2 * s2[None, :]
        y2 = x2 * c2[None, :] - x1 * s1[None, :]
    else:
        y1 = x1 * c1[None, :] - x2 * s1[None, :]
        y2 = x2 * c2[None, :] + x1 * s2[None, :]
    tl.store(dst + e1[None, :], y1.to(OUT.dtype.element_ty), mask=mask)
    tl.store(dst + e2[None, :], y2.to(OUT.dtype.element_ty), mask=mask)
    if HAS_PASS:
        p = 2 * ROT_HALF + tl.arange(0, BLOCK_P)
        pmask = rmask[:, None] & (p < D)[None, :]
        tl.store(dst + p[None, :], tl.load(src + p[None, :], mask=pmask, other=0.0), mask=pmask)


_CONFIGS = [triton.Config({}, num_warps=w) for w in (4, 2, 8)]
_TUNED = triton.autotune(_CONFIGS, key=["BH", "H", "D", "ROT_HALF"])(_rope)
# Rotated elements (each half) of one program's tile: a whole position's heads when they fit.
_TILE = 4096


def _launch(t: torch.Tensor, freqs: torch.Tensor, mscale: float, interleaved: bool, backward: bool) -> torch.Tensor:
    s, b, h, d = t.shape
    if t.stride(-1) != 1:
        t = t.contiguous()
    rot = freqs.shape[-1]
    out = torch.empty((s, b, h, d), dtype=t.dtype, device=t.device)
    freqs2 = freqs.reshape(freqs.shape[0], rot)
    if freqs2.stride(-1) != 1:
        freqs2 = freqs2.contiguous()
    block_r = triton.next_power_of_2(max(rot // 2, 1))
    block_p = triton.next_power_of_2(max(d - rot, 1))
    block_bh = min(triton.next_power_of_2(b * h), max(1, _TILE // block_r))
    warps = 4 if block_bh * block_r <= 2048 else 8
    if s * b * h > 0:
        launch(
            _rope, _TUNED, lambda meta: (s, triton.cdiv(b * h, block_bh)), {"num_warps": warps},
            t, freqs2, out, b * h, h, d, rot // 2, t.stride(0), t.stride(1), t.stride(2),
            freqs2.stride(0) if freqs2.shape[0] > 1 else 0, mscale,
            BACKWARD=backward, INTERLEAVED=interleaved, BLOCK_BH=block_bh, BLOCK_R=block_r, BLOCK_P=block_p,
            HAS_PASS=d > rot,
        )  # fmt: skip
    return out


class RotaryFunction(torch.autograd.Function):
    """RoPE of ``t`` [s, b, h, d] by ``freqs`` [s or 1, 1, 1, rot] (fp32 angles), like megatron's bshd path."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, freqs: torch.Tensor, mscale: float, interleaved: bool) -> torch.Tensor:
        ctx.save_for_backward(freqs)
        ctx.mscale = mscale
        ctx.interleaved = interleaved
        return _launch(t, freqs, mscale, interleaved, backward=False)

    @staticmethod
    def backward(ctx, dout: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        (freqs,) = ctx.saved_tensors
        return _launch(dout, freqs, ctx.mscale, ctx.interleaved, backward=True), None, None, None


def rotary(t: torch.Tensor, freqs: torch.Tensor, mscale: float = 1.0, interleaved: bool = False) -> torch.Tensor:
    """Rotate the first ``freqs.shape[-1]`` channels of each head of ``t`` [s, b, h, d]."""
    return RotaryFunction.apply(t, freqs, mscale, interleaved)
