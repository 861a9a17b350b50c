"""RMSNorm and LayerNorm over the last dimension, forward and backward.

Why our own: FlagGems 5.0.2's ``layer_norm_backward`` reads ``input.shape[0]`` as
the row count (wrong for 3-D input, and it writes out of bounds) and keeps mean and
rstd in the input dtype (bf16 statistics); its ``rms_norm`` family was seen giving
wrong gradients for a non-contiguous ``dy``. Megatron's norms see [s, b, h] input.

How: forward, one program normalizes ``BLOCK_M`` rows held whole in registers
(hidden sizes up to ``MAX_WIDTH``), and saves fp32 rstd (and mean); given an ``amax`` slot
(``HAS_AMAX``), it also ``atomic_max``-es max |y| of what it stores, for the fp8 cast of y
(``fp8_norm.py``: the cast then skips its amax pass; a constexpr, so the plain norm compiles as before). Backward, a
persistent grid (``PPS`` programs per multiprocessor): each program strides over
row tiles, loading the next tile before working on this one (so a load's latency
overlaps the arithmetic), writes dx for each and accumulates its share of dw (and
db) in fp32 registers; the per-program partial sums (at most 4 rows a multiprocessor) are
reduced by one more kernel, in a fixed order (deterministic, no atomics), which
also rounds dw (and db) to the weight's dtype. One pass over x and dy, one write
of dx: the bytes a fused norm must move. Rows per tile, warps and programs per
multiprocessor are autotuned per width, timing the backward together with the
reduction its partial sums cost (``FL_GEMS_AUTOTUNE=0``: a fixed config).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from . import cdiv, graph_timed, launch, multiprocessors, next_power_of_2, rows, run

__all__ = ["MAX_WIDTH", "LayerNormFunction", "RMSNormFunction", "layer_norm", "rms_norm"]

# Widest row one program holds in registers (fp32 working copy: 32768 * 4 B / 512 threads).
MAX_WIDTH = 32768


def _tile(width: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) of the fixed config: about 4096 elements a program, at least one row."""
    block_n = next_power_of_2(width)
    block_m = max(1, min(64, 4096 // block_n))
    tile = block_m * block_n
    num_warps = 4 if tile <= 2048 else 8 if tile <= 8192 else 16
    return block_m, block_n, num_warps


def _prune(configs: list, named_args: dict, **kwargs: Any) -> list:  # triton passes the constexprs
    """Tiles of at most 16384 elements, 4 to 32 of them a thread."""
    block_n = int(kwargs["BLOCK_N"])
    keep = []
    for config in configs:
        tile = config.kwargs["BLOCK_M"] * block_n
        per_thread = tile // (config.num_warps * 32)
        if tile <= 16384 and 4 <= per_thread <= 32:
            keep.append(config)
    return keep or configs[:1]


_FWD_CONFIGS = [triton.Config({"BLOCK_M": m}, num_warps=w) for m in (1, 2, 4, 8, 16) for w in (4, 8, 16)]
_BWD_CONFIGS = [
    triton.Config({"BLOCK_M": m, "PPS": p}, num_warps=w) for m in (1, 2, 4, 8) for w in (4, 8, 16) for p in (1, 2, 4)
]
_KEY = ["N", "M_BUCKET"]
_MAX_PPS = 4


@triton.jit
def _rms_fwd(
    X, W, Y, RSTD, M, N, stride_x, stride_y, eps, M_BUCKET, AMAX,
    HAS_AMAX: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    rows_ = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    rmask = rows_ < M
    cmask = cols < N
    mask = rmask[:, None] & cmask[None, :]
    r64 = rows_.to(tl.int64)
    x = tl.load(X + r64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    y = (x * rstd[:, None] * w[None, :]).to(Y.dtype.element_ty)
    tl.store(Y + r64[:, None] * stride_y + cols[None, :], y, mask=mask)
    tl.store(RSTD + rows_, rstd, mask=rmask)
    if HAS_AMAX:  # max |y| of the values as stored, for an fp8 cast of y (fp8_norm.py); masked lanes hold 0
        tl.atomic_max(AMAX, tl.max(tl.max(tl.where(mask, tl.abs(y.to(tl.float32)), 0.0), axis=1), axis=0))


@triton.jit
def _load_rows(X, DY, STAT, tile, M, stride_x, stride_dy, cols, cmask, BLOCK_M: tl.constexpr):
    """x and dy (storage dtype) and one fp32 statistic of the rows of ``tile`` (zeros past M)."""
    rows_ = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows_ < M
    mask = rmask[:, None] & cmask[None, :]
    r64 = rows_.to(tl.int64)
    x = tl.load(X + r64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    dy = tl.load(DY + r64[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0)
    return x, dy, tl.load(STAT + rows_, mask=rmask, other=0.0)


@triton.jit
def _rms_bwd(
    X, W, DY, DX, RSTD, DW_PART, M, N, stride_x, stride_dy, stride_dx, M_BUCKET,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PPS: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    # The next tile's rows are loaded before this tile's arithmetic: its memory latency
    # overlaps the work (without it the loop waits on every load: at [8192, 2048] the
    # kernel ran at 70% of copy bandwidth with 4 programs a multiprocessor, 40% with 1).
    x_raw, dy_raw, rstd = _load_rows(X, DY, RSTD, pid, M, stride_x, stride_dy, cols, cmask, BLOCK_M)
    for tile in range(pid, tl.cdiv(M, BLOCK_M), step):
        x_next, dy_next, rstd_next = _load_rows(X, DY, RSTD, tile + step, M, stride_x, stride_dy, cols, cmask, BLOCK_M)
        rows_ = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rows_ < M)[:, None] & cmask[None, :]
        x = x_raw.to(tl.float32)
        dy = dy_raw.to(tl.float32)
        xhat = x * rstd[:, None]
        wdy = dy * w[None, :]
        c = tl.sum(xhat * wdy, axis=1) / N
        dx = (wdy - xhat * c[:, None]) * rstd[:, None]
        tl.store(DX + rows_.to(tl.int64)[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * xhat, axis=0)
        x_raw, dy_raw, rstd = x_next, dy_next, rstd_next
    tl.store(DW_PART + pid.to(tl.int64) * N + cols, dw, mask=cmask)


@triton.jit
def _ln_fwd(
    X, W, B, Y, MEAN, RSTD, M, N, stride_x, stride_y, eps, M_BUCKET, AMAX,
    HAS_BIAS: tl.constexpr, HAS_AMAX: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    rows_ = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    rmask = rows_ < M
    cmask = cols < N
    mask = rmask[:, None] & cmask[None, :]
    r64 = rows_.to(tl.int64)
    x = tl.load(X + r64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / N + eps)
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    y = xc * rstd[:, None] * w[None, :]
    if HAS_BIAS:
        y += tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    yo = y.to(Y.dtype.element_ty)
    tl.store(Y + r64[:, None] * stride_y + cols[None, :], yo, mask=mask)
    tl.store(MEAN + rows_, mean, mask=rmask)
    tl.store(RSTD + rows_, rstd, mask=rmask)
    if HAS_AMAX:  # as in _rms_fwd
        tl.atomic_max(AMAX, tl.max(tl.max(tl.where(mask, tl.abs(yo.to(tl.float32)), 0.0), axis=1), axis=0))


@triton.jit
def _ln_bwd(
    X, W, DY, DX, MEAN, RSTD, DW_PART, DB_PART, M, N, stride_x, stride_dy, stride_dx, M_BUCKET,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PPS: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    x_raw, dy_raw, rstd = _load_rows(X, DY, RSTD, pid, M, stride_x, stride_dy, cols, cmask, BLOCK_M)
    for tile in range(pid, tl.cdiv(M, BLOCK_M), step):  # next tile's loads first, as in _rms_bwd
        x_next, dy_next, rstd_next = _load_rows(X, DY, RSTD, tile + step, M, stride_x, stride_dy, cols, cmask, BLOCK_M)
        rows_ = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        rmask = rows_ < M
        mask = rmask[:, None] & cmask[None, :]
        mean = tl.load(MEAN + rows_, mask=rmask, other=0.0)
        x = x_raw.to(tl.float32)
        dy = dy_raw.to(tl.float32)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        wdy = dy * w[None, :]
        c1 = tl.sum(xhat * wdy, axis=1) / N
        c2 = tl.sum(wdy, axis=1) / N
        dx = (wdy - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        tl.store(DX + rows_.to(tl.int64)[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * xhat, axis=0)
        if HAS_BIAS:
            db += tl.sum(dy, axis=0)
        x_raw, dy_raw, rstd = x_next, dy_next, rstd_next
    tl.store(DW_PART + pid.to(tl.int64) * N + cols, dw, mask=cmask)
    if HAS_BIAS:
        tl.store(DB_PART + pid.to(tl.int64) * N + cols, db, mask=cmask)


@triton.jit
def _sum_parts(
    PART_A, OUT_A, PART_B, OUT_B, P, N,
    HAS_B: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    """OUT[c] = sum over p of PART[p, c], in a fixed order, rounded once to OUT's dtype (dw, and db with it)."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < N
    acc_a = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
    for start in range(0, P, BLOCK_P):
        parts = start + tl.arange(0, BLOCK_P)
        mask = (parts < P)[:, None] & cmask[None, :]
        offsets = parts.to(tl.int64)[:, None] * N + cols[None, :]
        acc_a += tl.load(PART_A + offsets, mask=mask, other=0.0)
        if HAS_B:
            acc_b += tl.load(PART_B + offsets, mask=mask, other=0.0)
    tl.store(OUT_A + cols, tl.sum(acc_a, axis=0).to(OUT_A.dtype.element_ty), mask=cmask)
    if HAS_B:
        tl.store(OUT_B + cols, tl.sum(acc_b, axis=0).to(OUT_B.dtype.element_ty), mask=cmask)


def _reduce_parts(
    dw_part: torch.Tensor, used: int, dtype: torch.dtype, db_part: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight (and bias) gradient from the backward's per-program partial sums: one launch."""
    n = dw_part.shape[1]
    dw = torch.empty(n, dtype=dtype, device=dw_part.device)
    db = torch.empty(n, dtype=dtype, device=dw_part.device) if db_part is not None else None
    # Every partial row in one load per program (the loop's trips would be serial
    # memory latencies, ~1 us each: a 528 x 2048 reduction took 10 us in 32-row trips),
    # so the tile is tall and narrow: 8192 elements, 8 columns (one 32-byte sector) or more.
    block_p = min(next_power_of_2(max(used, 1)), 1024)
    block_c = min(next_power_of_2(n), max(8, 8192 // block_p))
    run(
        _sum_parts, (cdiv(n, block_c),),
        dw_part, dw, db_part if db_part is not None else dw_part, db if db is not None else dw, used, n,
        HAS_B=db_part is not None, BLOCK_P=block_p, BLOCK_C=block_c, num_warps=8 if block_p * block_c >= 8192 else 4,
    )  # fmt: skip
    return dw, db


def _tune_with_reduction(nargs: dict, exception: BaseException | None) -> None:
    """Autotuner post-hook: time each backward config together with the reduction its partial sums cost.

    More programs per multiprocessor can make the backward kernel itself a little
    faster while writing (and then reducing) more partial rows; tuning the kernel
    alone picked configs whose reduction cost more than they saved.
    """
    if exception is not None:
        return
    dw_part = nargs["DW_PART"]
    used = _bwd_programs(nargs["M"], nargs, dw_part.device)
    _reduce_parts(dw_part, used, torch.float32, nargs["DB_PART"] if nargs.get("HAS_BIAS") else None)


def _bucket(m: int) -> int:
    return next_power_of_2(max(m, 1))


@functools.lru_cache(maxsize=64)
def _fwd_default(width: int) -> dict:
    block_m, _, warps = _tile(width)
    return {"BLOCK_M": block_m, "num_warps": warps}


@functools.lru_cache(maxsize=64)
def _bwd_default(width: int) -> dict:
    block_m, _, warps = _tile(width)
    return {"BLOCK_M": block_m, "PPS": 4, "num_warps": warps}


def _bwd_programs(m: int, meta: dict, device: torch.device) -> int:
    return max(1, min(cdiv(m, meta["BLOCK_M"]), multiprocessors(device) * meta["PPS"]))


_PRUNE = {"early_config_prune": _prune}
_RMS_FWD = triton.autotune(_FWD_CONFIGS, key=_KEY, prune_configs_by=_PRUNE, do_bench=graph_timed)(_rms_fwd)
_RMS_BWD = triton.autotune(
    _BWD_CONFIGS, key=_KEY, prune_configs_by=_PRUNE, post_hook=_tune_with_reduction, do_bench=graph_timed
)(_rms_bwd)
_LN_FWD = triton.autotune(_FWD_CONFIGS, key=_KEY, prune_configs_by=_PRUNE, do_bench=graph_timed)(_ln_fwd)
_LN_BWD = triton.autotune(
    _BWD_CONFIGS, key=_KEY, prune_configs_by=_PRUNE, post_hook=_tune_with_reduction, do_bench=graph_timed
)(_ln_bwd)


class RMSNormFunction(torch.autograd.Function):
    """y = x / sqrt(mean(x^2) + eps) * w over the last dimension; any leading shape and strides."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, weight: torch.Tensor, eps: float, amax: torch.Tensor | None = None
    ) -> torch.Tensor:
        n = x.shape[-1]
        x2 = rows(x, n)
        m = x2.shape[0]
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        rstd = torch.empty(m, dtype=torch.float32, device=x.device)
        block_n = next_power_of_2(n)
        if m > 0:
            launch(
                _rms_fwd, _RMS_FWD, lambda meta: (cdiv(m, meta["BLOCK_M"]),), _fwd_default(n),
                x2, weight, y, rstd, m, n, x2.stride(0), n, eps, _bucket(m), rstd if amax is None else amax,
                HAS_AMAX=amax is not None, BLOCK_N=block_n,
            )  # fmt: skip
        ctx.save_for_backward(x2, weight, rstd)
        ctx.x_shape = x.shape
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None]:
        x2, weight, rstd = ctx.saved_tensors
        m, n = x2.shape
        dy2 = rows(dy, n)
        dx = torch.empty((m, n), dtype=x2.dtype, device=x2.device)
        device = x2.device
        dw_part = torch.empty(
            (max(1, min(m, multiprocessors(device) * _MAX_PPS)), n), dtype=torch.float32, device=device
        )
        if m > 0:
            meta = launch(
                _rms_bwd, _RMS_BWD, lambda meta: (_bwd_programs(m, meta, device),), _bwd_default(n),
                x2, weight, dy2, dx, rstd, dw_part, m, n, x2.stride(0), dy2.stride(0), n, _bucket(m),
                BLOCK_N=next_power_of_2(n),
            )  # fmt: skip
            dw, _ = _reduce_parts(dw_part, _bwd_programs(m, meta, device), weight.dtype)
        else:
            dw = torch.zeros_like(weight)
        return dx.view(ctx.x_shape), dw if ctx.needs_input_grad[1] else None, None, None


class LayerNormFunction(torch.autograd.Function):
    """y = (x - mean) / sqrt(var + eps) * w + b over the last dimension; any leading shape and strides."""

    @staticmethod
    def forward(
        ctx,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        eps: float,
        amax: torch.Tensor | None = None,
    ) -> torch.Tensor:
        n = x.shape[-1]
        x2 = rows(x, n)
        m = x2.shape[0]
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        mean = torch.empty(m, dtype=torch.float32, device=x.device)
        rstd = torch.empty(m, dtype=torch.float32, device=x.device)
        if m > 0:
            launch(
                _ln_fwd, _LN_FWD, lambda meta: (cdiv(m, meta["BLOCK_M"]),), _fwd_default(n),
                x2, weight, bias if bias is not None else weight, y, mean, rstd, m, n, x2.stride(0), n, eps,
                _bucket(m), rstd if amax is None else amax, HAS_BIAS=bias is not None, HAS_AMAX=amax is not None,
                BLOCK_N=next_power_of_2(n),
            )  # fmt: skip
        ctx.save_for_backward(x2, weight, mean, rstd)
        ctx.x_shape = x.shape
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, None, None]:
        x2, weight, mean, rstd = ctx.saved_tensors
        m, n = x2.shape
        dy2 = rows(dy, n)
        dx = torch.empty((m, n), dtype=x2.dtype, device=x2.device)
        device = x2.device
        parts = max(1, min(m, multiprocessors(device) * _MAX_PPS))
        dw_part = torch.empty((parts, n), dtype=torch.float32, device=device)
        db_part = torch.empty((parts if ctx.has_bias else 1, n), dtype=torch.float32, device=device)
        if m > 0:
            meta = launch(
                _ln_bwd, _LN_BWD, lambda meta: (_bwd_programs(m, meta, device),), _bwd_default(n),
                x2, weight, dy2, dx, mean, rstd, dw_part, db_part, m, n, x2.stride(0), dy2.stride(0), n, _bucket(m),
                HAS_BIAS=ctx.has_bias, BLOCK_N=next_power_of_2(n),
            )  # fmt: skip
            dw, db = _reduce_parts(
                dw_part, _bwd_programs(m, meta, device), weight.dtype, db_part if ctx.has_bias else None
            )
        else:
            dw = torch.zeros_like(weight)
            db = torch.zeros_like(weight) if ctx.has_bias else None
        return (
            dx.view(ctx.x_shape),
            dw if ctx.needs_input_grad[1] else None,
            db if ctx.needs_input_grad[2] else None,
            None,
            None,
        )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, amax: torch.Tensor | None = None) -> torch.Tensor:
    """RMSNorm of ``x`` over its last dimension (differentiable in x and weight); ``amax`` (an fp32 slot holding 0
    or less than the result's) becomes max |result|."""
    return RMSNormFunction.apply(x, weight, eps, amax)


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float, amax: torch.Tensor | None = None
) -> torch.Tensor:
    """LayerNorm of ``x`` over its last dimension (differentiable in x, weight and bias); ``amax`` as for
    :func:`rms_norm`."""
    return LayerNormFunction.apply(x, weight, bias, eps, amax)
