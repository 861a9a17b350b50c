"""Flash attention on megatron's [s, b, heads, d] layout: causal or full, GQA, forward and backward.

Why: the local spec's ``DotProductAttention`` materializes the [b, np, sq, sk]
scores (``baddbmm``), upcasts them, fills a causal mask, softmaxes, downcasts and
multiplies by V; backward keeps the fp32 probabilities. At seq 2048 that is
gigabytes of traffic per layer and the largest activation of the model. FlagGems
5.0.2 has a Triton attention (``scaled_dot_product_attention``), but its backward
always applies the causal mask (wrong gradients for ``is_causal=False``), asserts
the sequence is a multiple of its block, wants contiguous [b, h, s, d] tensors (a
permute copy of q, k, v, o and do each way) and, for GQA, writes dk/dv per query
head and sums them afterwards.

How (the FlashAttention-2 algorithm): forward, one program per (query block, batch
and head) streams key/value blocks, keeps a running max and sum (base-2
exponentials) and writes the output and the fp32 log-sum-exp per row; blocks
entirely below the causal diagonal skip the mask. Backward recomputes
probabilities from the log-sum-exp: one kernel per key block accumulates dk and dv
over every query head of its group (GQA needs no repeat and no reduction), another
per query block accumulates dq. Tensors are read through their strides, so the q,
k and v slices of megatron's fused QKV projection are used in place, and the
output is written as [sq, b, np * hn], the layout the projection after it reads.
fp32 inputs use IEEE fp32 matrix products (not TF32); half inputs use the tensor
cores with fp32 accumulation.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .._runtime import interpreting
from . import cdiv, graph_timed, launch, next_power_of_2, run

__all__ = ["MAX_HEAD_DIM", "FlashAttentionFunction", "flash_attention"]

MAX_HEAD_DIM = 256
_LOG2E = 1.4426950408889634


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr):
    """a @ b with fp32 accumulation; "interp" upcasts (the interpreter's dot misreads bf16)."""
    if PRECISION == "interp":
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        out = tl.dot(a, b, input_precision=PRECISION)
    return out


@triton.jit
def _fwd_inner(
    acc, l_i, m_i, q, K_base, V_base, stride_ks, stride_vs, offs_m, offs_d, lo, hi, SK, qk_scale,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n < SK)[:, None] & (offs_d < HEAD_DIM)[None, :]
        if MASKED or not EVEN_D:
            k = tl.load(K_base + offs_n[:, None] * stride_ks + offs_d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(V_base + offs_n[:, None] * stride_vs + offs_d[None, :], mask=kv_mask, other=0.0)
        else:
            k = tl.load(K_base + offs_n[:, None] * stride_ks + offs_d[None, :])
            v = tl.load(V_base + offs_n[:, None] * stride_vs + offs_d[None, :])
        qk = _dot(q, tl.trans(k), PRECISION) * qk_scale
        if MASKED:
            valid = (offs_n < SK)[None, :]
            if CAUSAL:
                valid = valid & (offs_m[:, None] >= offs_n[None, :])
            qk = tl.where(valid, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(
    Q, K, V, OUT, LSE, qk_scale, SQ, SK, H, GROUP,
    stride_qs, stride_qb, stride_qh, stride_ks, stride_kb, stride_kh, stride_vs, stride_vb, stride_vh,
    stride_os, stride_ob, stride_oh,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_mask = (offs_m < SQ)[:, None] & (offs_d < HEAD_DIM)[None, :]
    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    q = tl.load(q_base + offs_m[:, None].to(tl.int64) * stride_qs + offs_d[None, :], mask=row_mask, other=0.0)
    K_base = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    V_base = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if CAUSAL:
        split = start_m
        end = tl.minimum(start_m + BLOCK_M, SK)
    else:
        split = (SK // BLOCK_N) * BLOCK_N
        end = SK
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, K_base, V_base, stride_ks, stride_vs, offs_m, offs_d, 0, split, SK, qk_scale,
        False, CAUSAL, BLOCK_D == HEAD_DIM, HEAD_DIM, BLOCK_N, PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, K_base, V_base, stride_ks, stride_vs, offs_m, offs_d, split, end, SK, qk_scale,
        True, CAUSAL, BLOCK_D == HEAD_DIM, HEAD_DIM, BLOCK_N, PRECISION,
    )  # fmt: skip
    acc = acc / l_i[:, None]
    o_base = OUT + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    tl.store(
        o_base + offs_m[:, None].to(tl.int64) * stride_os + offs_d[None, :], acc.to(OUT.dtype.element_ty), mask=row_mask
    )
    tl.store(LSE + bh.to(tl.int64) * SQ + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < SQ)


@triton.jit
def _attn_bwd_delta(
    OUT, DO, DELTA, SQ, H, stride_os, stride_ob, stride_oh, stride_dos, stride_dob, stride_doh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m < SQ)[:, None] & (offs_d < HEAD_DIM)[None, :]
    rows_ = offs_m[:, None].to(tl.int64)
    o = tl.load(OUT + b * stride_ob + h * stride_oh + rows_ * stride_os + offs_d[None, :], mask=mask, other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows_ * stride_dos + offs_d[None, :], mask=mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(DELTA + bh.to(tl.int64) * SQ + offs_m, delta, mask=offs_m < SQ)


@triton.jit
def _dkdv_inner(
    dk, dv, k, v, Q_base, DO_base, LSE_base, DELTA_base, stride_qs, stride_dos, offs_n, offs_d, lo, hi, SQ,
    qk_scale,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        rows_ = offs_m[:, None].to(tl.int64)
        if MASKED or not EVEN_D:
            mask = (offs_m < SQ)[:, None] & (offs_d < HEAD_DIM)[None, :]
            q = tl.load(Q_base + rows_ * stride_qs + offs_d[None, :], mask=mask, other=0.0)
            do = tl.load(DO_base + rows_ * stride_dos + offs_d[None, :], mask=mask, other=0.0)
        else:
            q = tl.load(Q_base + rows_ * stride_qs + offs_d[None, :])
            do = tl.load(DO_base + rows_ * stride_dos + offs_d[None, :])
        if MASKED:
            lse = tl.load(LSE_base + offs_m, mask=offs_m < SQ, other=0.0)
            delta = tl.load(DELTA_base + offs_m, mask=offs_m < SQ, other=0.0)
        else:
            lse = tl.load(LSE_base + offs_m)
            delta = tl.load(DELTA_base + offs_m)
        qk_t = _dot(k, tl.trans(q), PRECISION) * qk_scale
        p_t = tl.math.exp2(qk_t - lse[None, :])
        if MASKED:
            valid = (offs_m < SQ)[None, :]
            if CAUSAL:
                valid = valid & (offs_m[None, :] >= offs_n[:, None])
            p_t = tl.where(valid, p_t, 0.0)
        dv += _dot(p_t.to(do.dtype), do, PRECISION)
        dp_t = _dot(v, tl.trans(do), PRECISION)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += _dot(ds_t.to(q.dtype), q, PRECISION)
    return dk, dv


@triton.jit
def _attn_bwd_dkdv(
    Q, K, V, DO, LSE, DELTA, DK, DV, qk_scale, sm_scale, SQ, SK, H, GROUP,
    stride_qs, stride_qb, stride_qh, stride_ks, stride_kb, stride_kh, stride_vs, stride_vb, stride_vh,
    stride_dos, stride_dob, stride_doh, stride_dks, stride_dkb, stride_dkh,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    start_n = tl.program_id(0) * BLOCK_N
    bhk = tl.program_id(1)
    HK = H // GROUP
    b = bhk // HK
    hk = bhk % HK
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (offs_n < SK)[:, None] & (offs_d < HEAD_DIM)[None, :]
    cols = offs_n[:, None].to(tl.int64)
    k = tl.load(
        K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh + cols * stride_ks + offs_d[None, :],
        mask=kv_mask,
        other=0.0,
    )
    v = tl.load(
        V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh + cols * stride_vs + offs_d[None, :],
        mask=kv_mask,
        other=0.0,
    )
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    full_m = (SQ // BLOCK_M) * BLOCK_M
    if CAUSAL:
        diag_lo = start_n
        diag_hi = tl.minimum(start_n + BLOCK_N, SQ)
        body_lo = start_n + BLOCK_N
        tail_lo = tl.maximum(body_lo, full_m)
    else:
        diag_lo = 0
        diag_hi = 0
        body_lo = 0
        tail_lo = full_m
    for g in range(GROUP):
        h = hk * GROUP + g
        bh = b * H + h
        Q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
        DO_base = DO + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
        LSE_base = LSE + bh.to(tl.int64) * SQ
        DELTA_base = DELTA + bh.to(tl.int64) * SQ
        dk, dv = _dkdv_inner(
            dk, dv, k, v, Q_base, DO_base, LSE_base, DELTA_base, stride_qs, stride_dos, offs_n, offs_d,
            diag_lo, diag_hi, SQ, qk_scale, True, CAUSAL, BLOCK_D == HEAD_DIM, HEAD_DIM, BLOCK_M, PRECISION,
        )  # fmt: skip
        dk, dv = _dkdv_inner(
            dk, dv, k, v, Q_base, DO_base, LSE_base, DELTA_base, stride_qs, stride_dos, offs_n, offs_d,
            body_lo, full_m, SQ, qk_scale, False, CAUSAL, BLOCK_D == HEAD_DIM, HEAD_DIM, BLOCK_M, PRECISION,
        )  # fmt: skip
        dk, dv = _dkdv_inner(
            dk, dv, k, v, Q_base, DO_base, LSE_base, DELTA_base, stride_qs, stride_dos, offs_n, offs_d,
            tail_lo, SQ, SQ, qk_scale, True, CAUSAL, BLOCK_D == HEAD_DIM, HEAD_DIM, BLOCK_M, PRECISION,
        )  # fmt: skip
    out = b.to(tl.int64) * stride_dkb + hk.to(tl.int64) * stride_dkh + cols * stride_dks + offs_d[None, :]
    tl.store(DK + out, (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_inner(
    dq, q, do, lse, delta, K_base, V_base, stride_ks, stride_vs, offs_m, offs_d, lo, hi, SK, qk_scale,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        cols = offs_n[:, None].to(tl.int64)
        if MASKED or not EVEN_D:
            kv_mask = (offs_n < SK)[:, None] & (offs_d < HEAD_DIM)[None, :]
            k = tl.load(K_base + cols * stride_ks + offs_d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(V_base + cols * stride_vs + offs_d[None, :], mask=kv_mask, other=0.0)
        else:
            k = tl.load(K_base + cols * stride_ks + offs_d[None, :])
            v = tl.load(V_base + cols * stride_vs + offs_d[None, :])
        qk = _dot(q, tl.trans(k), PRECISION) * qk_scale
        p = tl.math.exp2(qk - lse[:, None])
        if MASKED:
            valid = (offs_n < SK)[None, :]
            if CAUSAL:
                valid = valid & (offs_m[:, None] >= offs_n[None, :])
            p = tl.where(valid, p, 0.0)
        dp = _dot(do, tl.trans(v), PRECISION)
        ds = p * (dp - delta[:, None])
        dq += _dot(ds.to(k.dtype), k, PRECISION)
    return dq


@triton.jit
def _attn_bwd_dq(
    Q, K, V, DO, LSE, DELTA, DQ, qk_scale, sm_scale, SQ, SK, H, GROUP,
    stride_qs, stride_qb, stride_qh, stride_ks, stride_kb, stride_kh, stride_vs, stride_vb, stride_vh,
    stride_dos, stride_dob, stride_doh, stride_dqs, stride_dqb, stride_dqh,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_mask = (offs_m < SQ)[:, None] & (offs_d < HEAD_DIM)[None, :]
    rows_ = offs_m[:, None].to(tl.int64)
    q = tl.load(
        Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh + rows_ * stride_qs + offs_d[None, :],
        mask=row_mask,
        other=0.0,
    )
    do = tl.load(
        DO + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh + rows_ * stride_dos + offs_d[None, :],
        mask=row_mask,
        other=0.0,
    )
    lse = tl.load(LSE + bh.to(tl.int64) * SQ + offs_m, mask=offs_m < SQ, other=0.0)
    delta = tl.load(DELTA + bh.to(tl.int64) * SQ + offs_m, mask=offs_m < SQ, other=0.0)
    K_base = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    V_base = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if CAUSAL:
        split = start_m
        end = tl.minimum(start_m + BLOCK_M, SK)
    else:
        split = (SK // BLOCK_N) * BLOCK_N
        end = SK
    dq = _dq_inner(
        dq, q, do, lse, delta, K_base, V_base, stride_ks, stride_vs, offs_m, offs_d, 0, split, SK, qk_scale,
        False, CAUSAL, BLOCK_D == HEAD_DIM, HEAD_DIM, BLOCK_N, PRECISION,
    )  # fmt: skip
    dq = _dq_inner(
        dq, q, do, lse, delta, K_base, V_base, stride_ks, stride_vs, offs_m, offs_d, split, end, SK, qk_scale,
        True, CAUSAL, BLOCK_D == HEAD_DIM, HEAD_DIM, BLOCK_N, PRECISION,
    )  # fmt: skip
    out = b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh + rows_ * stride_dqs + offs_d[None, :]
    tl.store(DQ + out, (dq * sm_scale).to(DQ.dtype.element_ty), mask=row_mask)


# ---------------------------------------------------------------------------------- configs
# (BLOCK_M, BLOCK_N, num_warps, num_stages). Forward and dq need BLOCK_M % BLOCK_N == 0
# (the causal split falls on a key-block edge), dk/dv needs BLOCK_N % BLOCK_M == 0. Each list
# is the three fastest of eight configs timed alone on an H200 at [s 4096, b 2, 16 heads, 8 kv
# heads, d 128] bf16 (``attention_configs`` of bench/gpu_ops.py), fastest first (also the
# fixed config): fwd 0.322 / 0.349 / 0.365 ms, dq 0.402 / 0.427 / 0.443 ms, dk/dv 0.699 /
# 0.747 / 0.748 ms; the slowest of the eight took 0.761, 0.542 and 3.62 ms.
_FWD = [(64, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3)]
_DQ = [(128, 64, 8, 3), (64, 64, 4, 2), (64, 32, 4, 3)]
_DKDV = [(32, 64, 4, 3), (64, 128, 8, 2), (64, 128, 8, 3)]
_SMALL = {"fwd": (64, 32, 4, 2), "dq": (64, 32, 4, 2), "dkdv": (32, 64, 4, 2)}  # fp32, or head dim 256
_INTERPRETED = {"fwd": (32, 16, 4, 1), "dq": (32, 16, 4, 1), "dkdv": (16, 32, 4, 1)}
_KEY = ["SQ", "SK", "HEAD_DIM", "CAUSAL", "GROUP"]


def _tuned(kernel: triton.JITFunction, table: list[tuple[int, int, int, int]]) -> object:
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s) for m, n, w, s in table]
    return triton.autotune(configs=configs, key=_KEY, do_bench=graph_timed)(kernel)


_FWD_TUNED = _tuned(_attn_fwd, _FWD)
_DQ_TUNED = _tuned(_attn_bwd_dq, _DQ)
_DKDV_TUNED = _tuned(_attn_bwd_dkdv, _DKDV)


def _fixed(kind: str, dtype: torch.dtype, head_dim: int) -> tuple[int, int, int, int]:
    if interpreting():
        return _INTERPRETED[kind]
    if dtype == torch.float32 or head_dim > 128:
        return _SMALL[kind]
    return {"fwd": _FWD, "dq": _DQ, "dkdv": _DKDV}[kind][0]


def _launch(kind: str, kernel: triton.JITFunction, tuned: object, grid_of, dtype, head_dim, *args, **meta) -> None:
    """Run ``kernel`` autotuned (half precision on a GPU, head dim <= 128), else with one fixed config."""
    block_m, block_n, warps, stages = _fixed(kind, dtype, head_dim)
    default = {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
    tunable = dtype != torch.float32 and head_dim <= 128
    launch(kernel, tuned if tunable else None, lambda m: grid_of(m["BLOCK_M"], m["BLOCK_N"]), default, *args, **meta)


def _precision(dtype: torch.dtype) -> str:
    """IEEE fp32 products for fp32 input (not TF32); tensor cores for half input.

    Under ``TRITON_INTERPRET=1`` half operands are upcast ("interp"): triton 3.6's
    interpreter multiplies bf16 bit patterns as integers in ``tl.dot``.
    """
    if dtype == torch.float32:
        return "ieee"
    return "interp" if interpreting() else "tf32"


def _strides3(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def _last_dim_unit(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


class FlashAttentionFunction(torch.autograd.Function):
    """softmax(q k^T * scale [+ causal mask]) v for q [sq, b, hq, d], k and v [sk, b, hkv, d], hq % hkv == 0."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float) -> torch.Tensor:
        q, k, v = _last_dim_unit(q), _last_dim_unit(k), _last_dim_unit(v)
        sq, b, hq, d = q.shape
        sk, _, hkv, _ = k.shape
        group = hq // hkv
        block_d = max(16, next_power_of_2(d))
        precision = _precision(q.dtype)
        out = torch.empty((sq, b, hq, d), dtype=q.dtype, device=q.device)
        lse = torch.empty((b * hq, sq), dtype=torch.float32, device=q.device)
        qk_scale = sm_scale * _LOG2E
        _launch(
            "fwd", _attn_fwd, _FWD_TUNED, lambda bm, bn: (cdiv(sq, bm), b * hq), q.dtype, d,
            q, k, v, out, lse, qk_scale, sq, sk, hq, group, *_strides3(q), *_strides3(k), *_strides3(v),
            *_strides3(out), CAUSAL=causal, HEAD_DIM=d, BLOCK_D=block_d, PRECISION=precision,
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        return out

    @staticmethod
    def backward(ctx, dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None, None]:
        q, k, v, out, lse = ctx.saved_tensors
        dout = _last_dim_unit(dout)
        sq, b, hq, d = q.shape
        sk, _, hkv, _ = k.shape
        group = hq // hkv
        block_d = max(16, next_power_of_2(d))
        precision = _precision(q.dtype)
        qk_scale = ctx.sm_scale * _LOG2E
        delta = torch.empty((b * hq, sq), dtype=torch.float32, device=q.device)
        block_rows = 64 if not interpreting() else 16
        run(
            _attn_bwd_delta, (cdiv(sq, block_rows), b * hq), out, dout, delta, sq, hq, *_strides3(out), *_strides3(dout),
            HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=block_rows,
        )  # fmt: skip
        dq = torch.empty((sq, b, hq, d), dtype=q.dtype, device=q.device)
        dk = torch.empty((sk, b, hkv, d), dtype=k.dtype, device=k.device)
        dv = torch.empty((sk, b, hkv, d), dtype=v.dtype, device=v.device)
        _launch(
            "dkdv", _attn_bwd_dkdv, _DKDV_TUNED, lambda bm, bn: (cdiv(sk, bn), b * hkv), q.dtype, d,
            q, k, v, dout, lse, delta, dk, dv, qk_scale, ctx.sm_scale, sq, sk, hq, group,
            *_strides3(q), *_strides3(k), *_strides3(v), *_strides3(dout), *_strides3(dk),
            CAUSAL=ctx.causal, HEAD_DIM=d, BLOCK_D=block_d, PRECISION=precision,
        )  # fmt: skip
        _launch(
            "dq", _attn_bwd_dq, _DQ_TUNED, lambda bm, bn: (cdiv(sq, bm), b * hq), q.dtype, d,
            q, k, v, dout, lse, delta, dq, qk_scale, ctx.sm_scale, sq, sk, hq, group,
            *_strides3(q), *_strides3(k), *_strides3(v), *_strides3(dout), *_strides3(dq),
            CAUSAL=ctx.causal, HEAD_DIM=d, BLOCK_D=block_d, PRECISION=precision,
        )  # fmt: skip
        return dq, dk, dv, None, None


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, sm_scale: float | None = None
) -> torch.Tensor:
    """Attention of q [sq, b, hq, d] over k, v [sk, b, hkv, d]; returns [sq, b, hq, d] (contiguous)."""
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    return FlashAttentionFunction.apply(q, k, v, causal, scale)
