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

The fused QKV variant (megatron's ``fused_single_qkv_rope``) rotates query and key
and splits off value in one launch each way. It reads each rotated pair as two
contiguous runs (rotate-half: the two halves; interleaved: the whole run, split
into even and odd channels in registers) rather than gathering each channel's
partner: on the H200 a first version with partner gathers took 51 + 61 us
(forward + backward) at [2048, 4, 4 groups, (4 + 2) x 128] where a torch copy of
the same bytes takes 50 us for both (``docs/gpu_runs_h200/``).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from . import cdiv, graph_timed, launch, next_power_of_2

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
    block_e = next_power_of_2(rot)
    block_p = next_power_of_2(max(d - rot, 1))
    block_bh = min(next_power_of_2(b * h), max(1, _TILE // block_e))
    warps = 2 if block_bh * block_e <= 1024 else 4
    if s * b * h > 0:
        launch(
            _rope, _TUNED, lambda meta: (s, cdiv(b * h, block_bh)), {"num_warps": warps},
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
def _qkv_rows(s, BLOCK_R: tl.constexpr, ROWS, B, G, NG, HN, Q, K, V):
    """This program's rows of position ``s``, one for each (batch, query group, head slot); the
    slots of a group are its G query heads, its key and its value.

    Returns batch, group and slot of each row; the rows' masks ([R, 1]: in range, and query,
    key, value rows in range); and each row's head as a row pointer into the query
    [s, b, NG*G, HN] and key and value [s, b, NG, HN] tensors Q, K, V.
    """
    r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    slot = r % (G + 2)
    group_row = r // (G + 2)
    b = (group_row // NG).to(tl.int64)
    g = (group_row % NG).to(tl.int64)
    kv_row = (s * B + b) * NG + g
    rmask = (r < ROWS)[:, None]
    m_q, m_k, m_v = rmask & (slot < G)[:, None], rmask & (slot == G)[:, None], rmask & (slot == G + 1)[:, None]
    q_offset, kv_offset = ((kv_row * G + slot) * HN)[:, None], (kv_row * HN)[:, None]
    # One flat tuple: triton's compiler does not unpack nested tuples (its interpreter does).
    return b, g, slot, rmask, m_q, m_k, m_v, Q + q_offset, K + kv_offset, V + kv_offset


@triton.jit
def _pair_angles(F, s, stride_fs, ROT_HALF, HALF: tl.constexpr, INTERLEAVED: tl.constexpr):
    """Angles of the two channels of each rotated pair: (first, second), [HALF] each.

    A pair is (i, i + ROT_HALF) for rotate-half, (2i, 2i + 1) interleaved; both are
    loaded as whole contiguous runs and separated in registers (no gathers).
    """
    if INTERLEAVED:
        e = tl.arange(0, 2 * HALF)
        f = tl.load(F + s * stride_fs + e, mask=e < 2 * ROT_HALF, other=0.0).to(tl.float32)
        f1, f2 = tl.split(tl.reshape(f, (HALF, 2)))
    else:
        e = tl.arange(0, HALF)
        f1 = tl.load(F + s * stride_fs + e, mask=e < ROT_HALF, other=0.0).to(tl.float32)
        f2 = tl.load(F + s * stride_fs + ROT_HALF + e, mask=e < ROT_HALF, other=0.0).to(tl.float32)
    return f1, f2


@triton.jit
def _row_coefficients(
    QF, KF, s, stride_qf, stride_kf, ROT_HALF, q_rows, HALF: tl.constexpr, INTERLEAVED: tl.constexpr,
    SAME_ANGLES: tl.constexpr,
):  # fmt: skip
    """cos and sin of both channels of each pair, per row: query rows (``q_rows``, [R, 1]) by the query's
    angles, the others by the key's.

    SAME_ANGLES (megatron passes one rotary embedding for both): computed once, as
    [1, HALF] rows that broadcast, instead of twice and selected per row.
    """
    q1, q2 = _pair_angles(QF, s, stride_qf, ROT_HALF, HALF, INTERLEAVED)
    # One return statement: triton's compiler checks every return against the others,
    # even one in a branch a constexpr removes.
    if SAME_ANGLES:
        c1 = tl.cos(q1)[None, :]
        s1 = tl.sin(q1)[None, :]
        c2 = tl.cos(q2)[None, :]
        s2 = tl.sin(q2)[None, :]
    else:
        k1, k2 = _pair_angles(KF, s, stride_kf, ROT_HALF, HALF, INTERLEAVED)
        c1 = tl.where(q_rows, tl.cos(q1)[None, :], tl.cos(k1)[None, :])
        s1 = tl.where(q_rows, tl.sin(q1)[None, :], tl.sin(k1)[None, :])
        c2 = tl.where(q_rows, tl.cos(q2)[None, :], tl.cos(k2)[None, :])
        s2 = tl.where(q_rows, tl.sin(q2)[None, :], tl.sin(k2)[None, :])
    return c1, s1, c2, s2


@triton.jit
def _load_pairs(ptr, mask, ROT_HALF, HALF: tl.constexpr, INTERLEAVED: tl.constexpr):
    """The rotated channels of rows ``ptr`` [R, 1] as (first, second) of each pair, fp32 [R, HALF] each."""
    if INTERLEAVED:
        e = tl.arange(0, 2 * HALF)
        x = tl.load(ptr + e[None, :], mask=mask & (e < 2 * ROT_HALF)[None, :], other=0.0).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(x, (x.shape[0], HALF, 2)))
    else:
        e = tl.arange(0, HALF)
        m = mask & (e < ROT_HALF)[None, :]
        x1 = tl.load(ptr + e[None, :], mask=m, other=0.0).to(tl.float32)
        x2 = tl.load(ptr + ROT_HALF + e[None, :], mask=m, other=0.0).to(tl.float32)
    return x1, x2


@triton.jit
def _store_pairs(ptr, x1, x2, mask, ROT_HALF, HALF: tl.constexpr, INTERLEAVED: tl.constexpr):
    """Inverse of ``_load_pairs``: write (first, second) of each pair back to the rows ``ptr``."""
    dtype = ptr.dtype.element_ty
    if INTERLEAVED:
        e = tl.arange(0, 2 * HALF)
        x = tl.reshape(tl.join(x1, x2), (x1.shape[0], 2 * HALF))
        tl.store(ptr + e[None, :], x.to(dtype), mask=mask & (e < 2 * ROT_HALF)[None, :])
    else:
        e = tl.arange(0, HALF)
        m = mask & (e < ROT_HALF)[None, :]
        tl.store(ptr + e[None, :], x1.to(dtype), mask=m)
        tl.store(ptr + ROT_HALF + e[None, :], x2.to(dtype), mask=m)


@triton.jit
def _qkv_rope_fwd(
    MIXED, QF, KF, Q, K, V, B, NG, G, HN, ROT_HALF, stride_ms, stride_mb, stride_mg, stride_qf, stride_kf, ROWS,
    INTERLEAVED: tl.constexpr, BLOCK_R: tl.constexpr, HALF: tl.constexpr, BLOCK_P: tl.constexpr,
    HAS_PASS: tl.constexpr, SAME_ANGLES: tl.constexpr,
):  # fmt: skip
    s = tl.program_id(0).to(tl.int64)
    b, g, slot, rmask, m_q, m_k, m_v, q_dst, k_dst, v_dst = _qkv_rows(s, BLOCK_R, ROWS, B, G, NG, HN, Q, K, V)
    c1, s1, c2, s2 = _row_coefficients(QF, KF, s, stride_qf, stride_kf, ROT_HALF, m_q, HALF, INTERLEAVED, SAME_ANGLES)
    src = MIXED + (s * stride_ms + b * stride_mb + g * stride_mg + slot * HN)[:, None]
    x1, x2 = _load_pairs(src, rmask, ROT_HALF, HALF, INTERLEAVED)
    # Value rows pass through untouched (a where, not a rotation by angle 0: inf * 0 would be NaN).
    rotated = m_q | m_k
    y1 = tl.where(rotated, x1 * c1 - x2 * s1, x1)
    y2 = tl.where(rotated, x2 * c2 + x1 * s2, x2)
    # One masked store for each output: a mask constant along a row keeps the stores vectorized.
    _store_pairs(q_dst, y1, y2, m_q, ROT_HALF, HALF, INTERLEAVED)
    _store_pairs(k_dst, y1, y2, m_k, ROT_HALF, HALF, INTERLEAVED)
    _store_pairs(v_dst, y1, y2, m_v, ROT_HALF, HALF, INTERLEAVED)
    if HAS_PASS:  # channels past the rotary width, and the whole value head past it
        p = 2 * ROT_HALF + tl.arange(0, BLOCK_P)
        pmask = (p < HN)[None, :]
        x = tl.load(src + p[None, :], mask=rmask & pmask, other=0.0)
        tl.store(q_dst + p[None, :], x, mask=m_q & pmask)
        tl.store(k_dst + p[None, :], x, mask=m_k & pmask)
        tl.store(v_dst + p[None, :], x, mask=m_v & pmask)


@triton.jit
def _qkv_rope_bwd(
    DQ, DK, DV, QF, KF, DMIXED, B, NG, G, HN, ROT_HALF, stride_qf, stride_kf, ROWS,
    INTERLEAVED: tl.constexpr, BLOCK_R: tl.constexpr, HALF: tl.constexpr, BLOCK_P: tl.constexpr,
    HAS_PASS: tl.constexpr, SAME_ANGLES: tl.constexpr,
):  # fmt: skip
    s = tl.program_id(0).to(tl.int64)
    b, g, slot, rmask, m_q, m_k, m_v, q_src, k_src, v_src = _qkv_rows(s, BLOCK_R, ROWS, B, G, NG, HN, DQ, DK, DV)
    c1, s1, c2, s2 = _row_coefficients(QF, KF, s, stride_qf, stride_kf, ROT_HALF, m_q, HALF, INTERLEAVED, SAME_ANGLES)
    rotated = m_q | m_k
    # Each row reads the one gradient its slot belongs to (the other two loads are masked off).
    q1, q2 = _load_pairs(q_src, m_q, ROT_HALF, HALF, INTERLEAVED)
    k1, k2 = _load_pairs(k_src, m_k, ROT_HALF, HALF, INTERLEAVED)
    v1, v2 = _load_pairs(v_src, m_v, ROT_HALF, HALF, INTERLEAVED)
    d1, d2 = q1 + k1 + v1, q2 + k2 + v2
    # The rotation's transpose.
    x1 = tl.where(rotated, d1 * c1 + d2 * s2, d1)
    x2 = tl.where(rotated, d2 * c2 - d1 * s1, d2)
    dst = DMIXED + ((((s * B + b) * NG + g) * (G + 2) + slot) * HN)[:, None]  # contiguous [s, b, NG, (G + 2) * HN]
    _store_pairs(dst, x1, x2, rmask, ROT_HALF, HALF, INTERLEAVED)
    if HAS_PASS:
        p = 2 * ROT_HALF + tl.arange(0, BLOCK_P)
        pmask = (p < HN)[None, :]
        d = (
            tl.load(q_src + p[None, :], mask=m_q & pmask, other=0.0)
            + tl.load(k_src + p[None, :], mask=m_k & pmask, other=0.0)
            + tl.load(v_src + p[None, :], mask=m_v & pmask, other=0.0)
        )
        tl.store(dst + p[None, :], d, mask=rmask & pmask)


_QKV_CONFIGS = [triton.Config({"BLOCK_R": r}, num_warps=w) for r in (8, 16, 32, 64, 128, 4) for w in (1, 2, 4, 8)]
_QKV_KEY = ["ROWS", "HN", "ROT_HALF"]


def _qkv_prune(configs: list, named_args: dict, **kwargs: Any) -> list:  # triton passes the constexprs
    """Tiles of 8 to 64 elements a thread (fewer: threads hold copies of each other's elements,
    seen 3x slower on an H200), and no more rows than a position has (rounded up to a power of two)."""
    rows_ = next_power_of_2(int(named_args["ROWS"]))
    width = 2 * int(kwargs["HALF"])
    keep = [
        c for c in configs
        if c.kwargs["BLOCK_R"] <= max(rows_, 4) and 8 <= c.kwargs["BLOCK_R"] * width // (32 * c.num_warps) <= 64
    ]  # fmt: skip
    return keep or configs[:1]


_QKV_PRUNE = {"early_config_prune": _qkv_prune}
_QKV_FWD = triton.autotune(_QKV_CONFIGS, key=_QKV_KEY, prune_configs_by=_QKV_PRUNE, do_bench=graph_timed)(_qkv_rope_fwd)
_QKV_BWD = triton.autotune(_QKV_CONFIGS, key=_QKV_KEY, prune_configs_by=_QKV_PRUNE, do_bench=graph_timed)(_qkv_rope_bwd)
_QKV_DEFAULT = {"BLOCK_R": 8, "num_warps": 1}


def _qkv_meta(hn: int, rot_half: int, qf: torch.Tensor, kf: torch.Tensor) -> dict:
    """Constexprs: pairs per row (a power of two), the pass-through tail, one set of angles for both."""
    same = qf.data_ptr() == kf.data_ptr() and qf.shape == kf.shape and qf.stride() == kf.stride()
    return {
        "HALF": next_power_of_2(max(rot_half, 1)),
        "BLOCK_P": next_power_of_2(max(hn - 2 * rot_half, 1)),
        "HAS_PASS": hn > 2 * rot_half,
        "SAME_ANGLES": same,
    }


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
        if q_freqs.shape[-1] != k_freqs.shape[-1]:
            raise ValueError(f"query and key rotary widths differ: {q_freqs.shape[-1]} and {k_freqs.shape[-1]}")
        rot_half = q_freqs.shape[-1] // 2
        q = torch.empty((s, b, ng * g, hn), dtype=mixed.dtype, device=mixed.device)
        k = torch.empty((s, b, ng, hn), dtype=mixed.dtype, device=mixed.device)
        v = torch.empty((s, b, ng, hn), dtype=mixed.dtype, device=mixed.device)
        rows_ = b * ng * (g + 2)
        if s * rows_ > 0:
            launch(
                _qkv_rope_fwd, _QKV_FWD, lambda meta: (s, cdiv(rows_, meta["BLOCK_R"])), _QKV_DEFAULT,
                mixed, qf, kf, q, k, v, b, ng, g, hn, rot_half, mixed.stride(0), mixed.stride(1), mixed.stride(2),
                _position_stride(qf), _position_stride(kf), rows_, INTERLEAVED=interleaved, **_qkv_meta(hn, rot_half, qf, kf),
            )  # fmt: skip
        ctx.save_for_backward(qf, kf)
        ctx.dims = (s, b, ng, g, hn, rot_half, interleaved)
        return q, k, v

    @staticmethod
    def backward(ctx, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        qf, kf = ctx.saved_tensors
        s, b, ng, g, hn, rot_half, interleaved = ctx.dims
        dq, dk, dv = dq.contiguous(), dk.contiguous(), dv.contiguous()
        dmixed = torch.empty((s, b, ng, (g + 2) * hn), dtype=dq.dtype, device=dq.device)
        rows_ = b * ng * (g + 2)
        if s * rows_ > 0:
            launch(
                _qkv_rope_bwd, _QKV_BWD, lambda meta: (s, cdiv(rows_, meta["BLOCK_R"])), _QKV_DEFAULT,
                dq, dk, dv, qf, kf, dmixed, b, ng, g, hn, rot_half, _position_stride(qf), _position_stride(kf), rows_,
                INTERLEAVED=interleaved, **_qkv_meta(hn, rot_half, qf, kf),
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
