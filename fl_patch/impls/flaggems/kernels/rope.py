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

__all__ = ["FusedQKVRotaryFunction", "RotaryFunction", "fused_qkv_rotary", "rotary"]


@triton.jit
def _coefficients(FREQ, s, stride_fs, e, ROT_HALF, mscale, BACKWARD: tl.constexpr, INTERLEAVED: tl.constexpr):
    """(cos, signed sin, partner) of channels ``e`` at position ``s``: y[e] = x[e] cos + x[partner] sin.

    Each rotated channel pairs with the other half (rotate-half) or its neighbour
    (interleaved). Backward is the transpose: the partner's sine, the opposite sign.
    Channels past the rotary width are not meaningful here (callers mask them).
    """
    emask = e < 2 * ROT_HALF
    if INTERLEAVED:
        first = (e % 2) == 0
        partner = e ^ 1
    else:
        first = e < ROT_HALF
        partner = tl.where(first, e + ROT_HALF, e - ROT_HALF)
    f = tl.load(FREQ + s * stride_fs + e, mask=emask, other=0.0).to(tl.float32)
    cos = tl.cos(f) * mscale
    if BACKWARD:
        f_partner = tl.load(FREQ + s * stride_fs + partner, mask=emask, other=0.0).to(tl.float32)
        sin = tl.where(first, 1.0, -1.0) * tl.sin(f_partner) * mscale
    else:
        sin = tl.where(first, -1.0, 1.0) * tl.sin(f) * mscale
    return cos, sin, partner


@triton.jit
def _rope(
    T, FREQ, OUT, BH, H, D, ROT_HALF, stride_ts, stride_tb, stride_th, stride_fs, mscale,
    BACKWARD: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_BH: tl.constexpr, BLOCK_E: tl.constexpr,
    BLOCK_P: tl.constexpr, HAS_PASS: tl.constexpr,
):  # fmt: skip
    s = tl.program_id(0).to(tl.int64)
    r = tl.program_id(1) * BLOCK_BH + tl.arange(0, BLOCK_BH)  # rows of the flattened (batch, head) plane
    rmask = r < BH
    # The angles of this position, once for every (batch, head) row of the tile. Whole
    # rows are loaded and stored at once; the partner load hits the lines the first brought.
    e = tl.arange(0, BLOCK_E)
    emask = e < 2 * ROT_HALF
    cos, sin, partner = _coefficients(FREQ, s, stride_fs, e, ROT_HALF, mscale, BACKWARD, INTERLEAVED)
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


# ---------------------------------------------------------------------------------------------
# Query and key of a fused QKV projection, rotated in one launch (megatron's fused_single_qkv_rope)


@triton.jit
def _qkv_rows(r, G, NG):
    """(batch, query group, head slot) of rows ``r`` of one position; slots: G query heads, key, value."""
    slot = r % (G + 2)
    group_row = r // (G + 2)
    return (group_row // NG).to(tl.int64), (group_row % NG).to(tl.int64), slot


@triton.jit
def _qkv_coefficients(
    QF, KF, s, stride_qf, stride_kf, e, ROT_HALF_Q, ROT_HALF_K, is_q, is_k, BACKWARD: tl.constexpr,
    INTERLEAVED: tl.constexpr,
):  # fmt: skip
    """Per (row, channel): query rows use the query angles, key rows the key's; value rows and
    channels past the rotary width pass through (cos 1, sin 0, partner itself)."""
    cq, sq, pq = _coefficients(QF, s, stride_qf, e, ROT_HALF_Q, 1.0, BACKWARD, INTERLEAVED)
    ck, sk, pk = _coefficients(KF, s, stride_kf, e, ROT_HALF_K, 1.0, BACKWARD, INTERLEAVED)
    rot_q = is_q[:, None] & (e < 2 * ROT_HALF_Q)[None, :]
    rot_k = is_k[:, None] & (e < 2 * ROT_HALF_K)[None, :]
    cos = tl.where(rot_q, cq[None, :], tl.where(rot_k, ck[None, :], 1.0))
    sin = tl.where(rot_q, sq[None, :], tl.where(rot_k, sk[None, :], 0.0))
    partner = tl.where(rot_q, pq[None, :], tl.where(rot_k, pk[None, :], e[None, :]))
    return cos, sin, partner


@triton.jit
def _qkv_rope_fwd(
    MIXED, QF, KF, Q, K, V, B, NG, G, HN, ROT_HALF_Q, ROT_HALF_K,
    stride_ms, stride_mb, stride_mg, stride_qf, stride_kf,
    INTERLEAVED: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_E: tl.constexpr,
):  # fmt: skip
    s = tl.program_id(0).to(tl.int64)
    r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)  # (batch, group, slot) rows of this position
    rmask = r < B * NG * (G + 2)
    b, g, slot = _qkv_rows(r, G, NG)
    is_q = slot < G
    is_k = slot == G
    e = tl.arange(0, BLOCK_E)
    cos, sin, partner = _qkv_coefficients(
        QF, KF, s, stride_qf, stride_kf, e, ROT_HALF_Q, ROT_HALF_K, is_q, is_k, False, INTERLEAVED
    )
    mask = rmask[:, None] & (e < HN)[None, :]
    src = MIXED + (s * stride_ms + b * stride_mb + g * stride_mg + slot * HN)[:, None]
    x = tl.load(src + e[None, :], mask=mask, other=0.0).to(tl.float32)
    x_partner = tl.load(src + partner, mask=mask, other=0.0).to(tl.float32)
    y = x * cos + x_partner * sin
    # Three contiguous outputs: query [s, b, NG*G, HN], key and value [s, b, NG, HN].
    q_row = ((s * B + b) * NG + g) * G + slot
    kv_row = (s * B + b) * NG + g
    tl.store(Q + (q_row * HN)[:, None] + e[None, :], y.to(Q.dtype.element_ty), mask=mask & is_q[:, None])
    tl.store(K + (kv_row * HN)[:, None] + e[None, :], y.to(K.dtype.element_ty), mask=mask & is_k[:, None])
    is_v = slot == G + 1
    tl.store(V + (kv_row * HN)[:, None] + e[None, :], y.to(V.dtype.element_ty), mask=mask & is_v[:, None])


@triton.jit
def _qkv_rope_bwd(
    DQ, DK, DV, QF, KF, DMIXED, B, NG, G, HN, ROT_HALF_Q, ROT_HALF_K, stride_qf, stride_kf,
    INTERLEAVED: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_E: tl.constexpr,
):  # fmt: skip
    s = tl.program_id(0).to(tl.int64)
    r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = r < B * NG * (G + 2)
    b, g, slot = _qkv_rows(r, G, NG)
    is_q = slot < G
    is_k = slot == G
    is_v = slot == G + 1
    e = tl.arange(0, BLOCK_E)
    cos, sin, partner = _qkv_coefficients(
        QF, KF, s, stride_qf, stride_kf, e, ROT_HALF_Q, ROT_HALF_K, is_q, is_k, True, INTERLEAVED
    )
    mask = rmask[:, None] & (e < HN)[None, :]
    q_base = DQ + (((s * B + b) * NG + g) * G + slot) * HN
    kv_row = (s * B + b) * NG + g
    # Each row reads the one gradient its slot belongs to (the other two loads are masked off).
    m_q, m_k, m_v = mask & is_q[:, None], mask & is_k[:, None], mask & is_v[:, None]
    x = (
        tl.load(q_base[:, None] + e[None, :], mask=m_q, other=0.0).to(tl.float32)
        + tl.load(DK + (kv_row * HN)[:, None] + e[None, :], mask=m_k, other=0.0).to(tl.float32)
        + tl.load(DV + (kv_row * HN)[:, None] + e[None, :], mask=m_v, other=0.0).to(tl.float32)
    )
    x_partner = tl.load(q_base[:, None] + partner, mask=m_q, other=0.0).to(tl.float32) + tl.load(
        DK + (kv_row * HN)[:, None] + partner, mask=m_k, other=0.0
    ).to(tl.float32)
    y = x * cos + x_partner * sin
    dst = DMIXED + ((kv_row * (G + 2) + slot) * HN)[:, None]
    tl.store(dst + e[None, :], y.to(DMIXED.dtype.element_ty), mask=mask)


def _qkv_launch_shape(b: int, ng: int, g: int, hn: int) -> tuple[int, int, int]:
    """(BLOCK_R, BLOCK_E, row tiles a position): tiles of about _TILE elements, whole rows."""
    block_e = triton.next_power_of_2(hn)
    rows_ = b * ng * (g + 2)
    block_r = min(triton.next_power_of_2(rows_), max(1, _TILE // block_e))
    return block_r, block_e, triton.cdiv(rows_, block_r)


def _warps(block_r: int, block_e: int) -> int:
    return 2 if block_r * block_e <= 1024 else 4


class FusedQKVRotaryFunction(torch.autograd.Function):
    """(query, key, value) of a fused QKV tensor [s, b, ng, (g + 2) * hn]; query and key rotated."""

    @staticmethod
    def forward(
        ctx, mixed: torch.Tensor, q_freqs: torch.Tensor, k_freqs: torch.Tensor, g: int, hn: int, interleaved: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s, b, ng, _ = mixed.shape
        if mixed.stride(-1) != 1:
            mixed = mixed.contiguous()
        qf, kf = _angles_2d(q_freqs, s), _angles_2d(k_freqs, s)
        q = torch.empty((s, b, ng * g, hn), dtype=mixed.dtype, device=mixed.device)
        k = torch.empty((s, b, ng, hn), dtype=mixed.dtype, device=mixed.device)
        v = torch.empty((s, b, ng, hn), dtype=mixed.dtype, device=mixed.device)
        block_r, block_e, tiles = _qkv_launch_shape(b, ng, g, hn)
        if s * b * ng > 0:
            _qkv_rope_fwd[(s, tiles)](
                mixed, qf, kf, q, k, v, b, ng, g, hn, q_freqs.shape[-1] // 2, k_freqs.shape[-1] // 2,
                mixed.stride(0), mixed.stride(1), mixed.stride(2), _position_stride(qf), _position_stride(kf),
                INTERLEAVED=interleaved, BLOCK_R=block_r, BLOCK_E=block_e, num_warps=_warps(block_r, block_e),
            )  # fmt: skip
        ctx.save_for_backward(qf, kf)
        ctx.dims = (s, b, ng, g, hn, q_freqs.shape[-1] // 2, k_freqs.shape[-1] // 2, interleaved)
        return q, k, v

    @staticmethod
    def backward(ctx, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        qf, kf = ctx.saved_tensors
        s, b, ng, g, hn, rot_half_q, rot_half_k, interleaved = ctx.dims
        dq, dk, dv = dq.contiguous(), dk.contiguous(), dv.contiguous()
        dmixed = torch.empty((s, b, ng, (g + 2) * hn), dtype=dq.dtype, device=dq.device)
        block_r, block_e, tiles = _qkv_launch_shape(b, ng, g, hn)
        if s * b * ng > 0:
            _qkv_rope_bwd[(s, tiles)](
                dq, dk, dv, qf, kf, dmixed, b, ng, g, hn, rot_half_q, rot_half_k,
                _position_stride(qf), _position_stride(kf),
                INTERLEAVED=interleaved, BLOCK_R=block_r, BLOCK_E=block_e, num_warps=_warps(block_r, block_e),
            )  # fmt: skip
        return dmixed, None, None, None, None, None


def _angles_2d(freqs: torch.Tensor, s: int) -> torch.Tensor:
    """Frequencies [s or more, 1, 1, rot] as fp32 [s or 1, rot] with unit channel stride."""
    flat = freqs.reshape(freqs.shape[0], freqs.shape[-1])[:s].float()
    return flat if flat.stride(-1) == 1 else flat.contiguous()


def _position_stride(angles: torch.Tensor) -> int:
    return angles.stride(0) if angles.shape[0] > 1 else 0


def fused_qkv_rotary(
    mixed: torch.Tensor, q_freqs: torch.Tensor, k_freqs: torch.Tensor, g: int, hn: int, interleaved: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split ``mixed`` [s, b, ng, (g + 2) * hn] into query [s, b, ng * g, hn], key and value [s, b, ng, hn],
    rotating query by ``q_freqs`` and key by ``k_freqs`` ([s or 1, 1, 1, rot] fp32 angles): one launch each way."""
    return FusedQKVRotaryFunction.apply(mixed, q_freqs, k_freqs, g, hn, interleaved)
