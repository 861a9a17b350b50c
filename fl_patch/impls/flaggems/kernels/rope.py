"""Rotary position embedding on [s, b, h, d] tensors, forward and backward.

Why: upstream's unfused path (``_apply_rotary_pos_emb_bshd``) computes cos and sin
of the frequencies, rotate-half (a ``torch.cat`` of negated halves), two products,
a sum and a final ``torch.cat``: about eight kernels and their intermediates per
call, twice a layer (query and key), and autograd replays it backward.

How: one program per position rotates every (batch, head) row of that position
(split in tiles of 2048 rotated elements when more): it computes cos/sin of the
fp32 frequencies once, in registers (no cos/sin tensors), for all of them, reads
the query or key where it lies (a strided slice of the fused QKV output), whole
rows at a time, and writes a contiguous result; the dimensions past the rotary
width pass through. Backward is the same kernel with the rotation's transpose
(the partner's sine, the opposite sign).

Measured (H200, bf16, q [2048, 4, 16, 128] from a fused QKV + k of 4 heads, forward
and backward): 57-60 us for the four calls. Each kernel runs at or faster than a
torch copy of the same bytes (k: 10.6 us, a copy of those 8.4 MB: 11.1 us), so what
is left is the fixed cost of four launches, not the kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import graph_timed, launch

__all__ = ["RotaryFunction", "rotary"]


@triton.jit
def _rope(
    T, FREQ, OUT, BH, H, D, ROT_HALF, stride_ts, stride_tb, stride_th, stride_fs, mscale,
    BACKWARD: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_BH: tl.constexpr, BLOCK_E: tl.constexpr,
    BLOCK_P: tl.constexpr, HAS_PASS: tl.constexpr,
):  # fmt: skip
    s = tl.program_id(0).to(tl.int64)
    r = tl.program_id(1) * BLOCK_BH + tl.arange(0, BLOCK_BH)  # rows of the flattened (batch, head) plane
    rmask = r < BH
    # Each rotated channel e pairs with one partner: the other half (rotate-half) or its
    # neighbour (interleaved). y[e] = x[e] cos[e] -/+ x[partner] sin[e]: whole rows are
    # loaded and stored at once; the partner load hits the lines the first one brought.
    e = tl.arange(0, BLOCK_E)
    emask = e < 2 * ROT_HALF
    if INTERLEAVED:
        first = (e % 2) == 0
        partner = e ^ 1
    else:
        first = e < ROT_HALF
        partner = tl.where(first, e + ROT_HALF, e - ROT_HALF)
    # The angles of this position, once for every (batch, head) row of the tile.
    f = tl.load(FREQ + s * stride_fs + e, mask=emask, other=0.0).to(tl.float32)
    cos = tl.cos(f) * mscale
    if BACKWARD:  # the transpose: the partner's sine, the opposite sign
        f_partner = tl.load(FREQ + s * stride_fs + partner, mask=emask, other=0.0).to(tl.float32)
        sin = tl.where(first, 1.0, -1.0) * tl.sin(f_partner) * mscale
    else:
        sin = tl.where(first, -1.0, 1.0) * tl.sin(f) * mscale
    b = (r // H).to(tl.int64)
    h = (r % H).to(tl.int64)
    src = T + (s * stride_ts + b * stride_tb + h * stride_th)[:, None]
    dst = OUT + ((s * BH + r) * D)[:, None]
    mask = rmask[:, None] & emask[None, :]
    x = tl.load(src + e[None, :], mask=mask, other=0.0).to(tl.float32)
    x_partner = tl.load(src + partner[None, :], mask=mask, other=0.0).to(tl.float32)
    y = x * cos[None, :] + x_partner * sin[None, :]
    tl.store(dst + e[None, :], y.to(OUT.dtype.element_ty), mask=mask)
    if HAS_PASS:
        p = 2 * ROT_HALF + tl.arange(0, BLOCK_P)
        pmask = rmask[:, None] & (p < D)[None, :]
        tl.store(dst + p[None, :], tl.load(src + p[None, :], mask=pmask, other=0.0), mask=pmask)


_CONFIGS = [triton.Config({}, num_warps=w) for w in (4, 2, 8)]  # 2 or 4 won on an H200; 8 was 1.5x slower
_TUNED = triton.autotune(_CONFIGS, key=["BH", "H", "D", "ROT_HALF"], do_bench=graph_timed)(_rope)
# Rotated elements of one program's tile: a whole position's (batch, head) rows when they
# fit. On an H200 at [2048, 4, 16, 128], 2048 beat 4096 and 8192 (23.3 vs 24.0/23.5 us).
_TILE = 2048


def _launch(t: torch.Tensor, freqs: torch.Tensor, mscale: float, interleaved: bool, backward: bool) -> torch.Tensor:
    s, b, h, d = t.shape
    if t.stride(-1) != 1:
        t = t.contiguous()
    rot = freqs.shape[-1]
    out = torch.empty((s, b, h, d), dtype=t.dtype, device=t.device)
    freqs2 = freqs.reshape(freqs.shape[0], rot)
    if freqs2.stride(-1) != 1:
        freqs2 = freqs2.contiguous()
    block_e = triton.next_power_of_2(rot)
    block_p = triton.next_power_of_2(max(d - rot, 1))
    block_bh = min(triton.next_power_of_2(b * h), max(1, _TILE // block_e))
    warps = 2 if block_bh * block_e <= 1024 else 4
    if s * b * h > 0:
        launch(
            _rope, _TUNED, lambda meta: (s, triton.cdiv(b * h, block_bh)), {"num_warps": warps},
            t, freqs2, out, b * h, h, d, rot // 2, t.stride(0), t.stride(1), t.stride(2),
            freqs2.stride(0) if freqs2.shape[0] > 1 else 0, mscale,
            BACKWARD=backward, INTERLEAVED=interleaved, BLOCK_BH=block_bh, BLOCK_E=block_e, BLOCK_P=block_p,
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
