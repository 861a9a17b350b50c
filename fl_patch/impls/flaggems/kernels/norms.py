"""RMSNorm and LayerNorm over the last dimension, forward and backward.

Why our own: FlagGems 5.0.2's ``layer_norm_backward`` reads ``input.shape[0]`` as
the row count (wrong for 3-D input, and it writes out of bounds) and keeps mean and
rstd in the input dtype (bf16 statistics); its ``rms_norm`` family was seen giving
wrong gradients for a non-contiguous ``dy``. Megatron's norms see [s, b, h] input.

How: forward, one program normalizes ``BLOCK_M`` rows held whole in registers
(hidden sizes up to ``MAX_WIDTH``), and saves fp32 rstd (and mean). Backward, a
persistent grid (``PPS`` programs per multiprocessor): each program strides over
row tiles, writes dx for each and accumulates its share of dw (and db) in fp32
registers. The per-program partial sums (at most 4 rows a multiprocessor) become
dw (and db), rounded once to the weight's dtype, in one of two ways, both in a
fixed order (deterministic):
- folded in the same launch (``FOLD``): each program writes its partial row and
  takes a ticket from a counter of its group of ``FAN_IN`` rows; the program that
  takes a group's last ticket sums the group into a row of the next level, and so
  on up a tree; whoever completes the root writes dw. Why: at a ~1B model's shapes
  (RMSNorm over [8192, 2048]: ~60 us forward+backward) a second, dependent kernel
  costs ~6 us of launch gap plus its own ramp; the tree's tail is a few
  sub-microsecond loads on one multiprocessor. The counters are zeroed by the
  forward kernel (so no state is shared between calls or streams, and nothing is
  launched for them) and each is set back to zero by the program that completes it
  (so a backward can be rerun, as the autotuner does);
- or by one more kernel (``_sum_parts``), for rows too wide for a tile of
  ``FAN_IN`` rows in registers and as the autotuner's alternative.
One pass over x and dy, one write of dx: the bytes a fused norm must move. Rows
per tile, warps, programs per multiprocessor and the way of reducing are
autotuned per width, timing the backward together with the reduction its partial
sums cost (``FL_GEMS_AUTOTUNE=0``: a fixed config).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import graph_timed, launch, multiprocessors, rows

__all__ = ["MAX_WIDTH", "LayerNormFunction", "RMSNormFunction", "layer_norm", "rms_norm"]

# Widest row one program holds in registers (fp32 working copy: 32768 * 4 B / 512 threads).
MAX_WIDTH = 32768


def _tile(width: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) of the fixed config: about 4096 elements a program, at least one row."""
    block_n = triton.next_power_of_2(width)
    block_m = max(1, min(64, 4096 // block_n))
    tile = block_m * block_n
    num_warps = 4 if tile <= 2048 else 8 if tile <= 8192 else 16
    return block_m, block_n, num_warps


def _prune(configs: list, named_args: dict, **kwargs: object) -> list:
    """Tiles of at most 16384 elements, 4 to 32 of them a thread."""
    block_n = int(kwargs["BLOCK_N"])
    keep = []
    for config in configs:
        tile = config.kwargs["BLOCK_M"] * block_n
        per_thread = tile // (config.num_warps * 32)
        if tile <= 16384 and 4 <= per_thread <= 32:
            keep.append(config)
    return keep or configs[:1]


def _fan_in(block_n: int, num_warps: int) -> int:
    """Partial rows one program sums at a time when folding: a [FAN_IN, BLOCK_N] fp32 tile, ~32 a thread; 0: too wide."""
    fan_in = min(16, triton.next_power_of_2(max(1, num_warps * 32 * 32 // block_n)))
    return fan_in if fan_in >= 2 and block_n <= 8192 else 0


def _prune_bwd(configs: list, named_args: dict, **kwargs: object) -> list:
    """The forward's tiles; folding configs get their ``FAN_IN`` (and are dropped where rows are too wide)."""
    block_n = int(kwargs["BLOCK_N"])
    keep = []
    for config in _prune(configs, named_args, **kwargs):
        if config.kwargs["FOLD"]:
            fan_in = _fan_in(block_n, config.num_warps)
            if not fan_in:
                continue
            config = triton.Config({**config.kwargs, "FAN_IN": fan_in}, num_warps=config.num_warps)
        keep.append(config)
    return keep or [triton.Config({**configs[0].kwargs, "FOLD": False}, num_warps=configs[0].num_warps)]


_FWD_CONFIGS = [triton.Config({"BLOCK_M": m}, num_warps=w) for m in (1, 2, 4, 8, 16) for w in (4, 8, 16)]
_BWD_CONFIGS = [
    triton.Config({"BLOCK_M": m, "PPS": p, "FOLD": f, "FAN_IN": 0}, num_warps=w)
    for f in (True, False)
    for m in (1, 2, 4, 8)
    for w in (4, 8, 16)
    for p in (1, 2, 4)
]
_KEY = ["N", "M_BUCKET"]
_MAX_PPS = 4


@triton.jit
def _zero_counters(COUNTS, N_COUNTS, BLOCK_COUNTS: tl.constexpr):
    """The forward's first program zeroes the counters its backward folds with (no launch of its own)."""
    if tl.program_id(0) == 0:
        offsets = tl.arange(0, BLOCK_COUNTS)
        tl.store(COUNTS + offsets, tl.zeros([BLOCK_COUNTS], dtype=tl.int32), mask=offsets < N_COUNTS)


@triton.jit
def _fold(PART, OUT, COUNTS, row, n_rows, N, cols, cmask, FAN_IN: tl.constexpr):
    """Sum the ``n_rows`` partial rows of PART (this program wrote ``row``) into OUT, in this launch.

    A tree of FAN_IN-row groups, in a fixed order whichever program finishes last:
    level 0 is PART's first ``n_rows`` rows, each next level's rows follow in PART,
    and the groups' counters follow one another in COUNTS the same way. The program
    that takes a group's last ticket sums the group and goes on one level up; the
    others are done. The root's sum, rounded to OUT's dtype, is OUT.
    """
    base = n_rows * 0  # first row of this level in PART (tensors: carried by the loop)
    counter = n_rows * 0  # first counter of this level in COUNTS
    node = row
    level_rows = n_rows
    active = level_rows > 0
    while active:
        group = node // FAN_IN
        first = group * FAN_IN
        size = tl.minimum(level_rows - first, FAN_IN)
        # Every thread's store of this program's row before its ticket: the barrier
        # orders them in the program, the ticket's release publishes them to whoever
        # takes the group's last ticket (acquire).
        tl.debug_barrier()
        ticket = tl.atomic_add(COUNTS + counter + group, 1, sem="acq_rel", scope="gpu")
        active = ticket == size - 1
        if active:
            tl.store(COUNTS + counter + group, 0)  # ready for the next backward (or autotuning run)
            members = tl.arange(0, FAN_IN)
            offsets = (base + first + members).to(tl.int64)[:, None] * N + cols[None, :]
            mask = (members < size)[:, None] & cmask[None, :]
            # .cg: from L2, where the other programs' rows are, never a stale L1 line
            total = tl.sum(tl.load(PART + offsets, mask=mask, other=0.0, cache_modifier=".cg"), axis=0)
            groups = tl.cdiv(level_rows, FAN_IN)
            if groups == 1:
                tl.store(OUT + cols, total.to(OUT.dtype.element_ty), mask=cmask)
            else:
                tl.store(PART + (base + level_rows + group).to(tl.int64) * N + cols, total, mask=cmask)
            active = groups > 1
            base += level_rows
            counter += groups
            node = group
            level_rows = groups


@triton.jit
def _finish_partial(PART, OUT, COUNTS, pid, N, cols, cmask, part, FOLD: tl.constexpr, FAN_IN: tl.constexpr):
    """Write this program's partial sum; fold all of them into OUT when FOLD (else ``_sum_parts`` does, later)."""
    tl.store(PART + pid.to(tl.int64) * N + cols, part, mask=cmask)
    if FOLD:
        _fold(PART, OUT, COUNTS, pid, tl.num_programs(0), N, cols, cmask, FAN_IN)


@triton.jit
def _rms_fwd(
    X, W, Y, RSTD, COUNTS, N_COUNTS, M, N, stride_x, stride_y, eps, M_BUCKET,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_COUNTS: tl.constexpr,
):  # fmt: skip
    _zero_counters(COUNTS, N_COUNTS, BLOCK_COUNTS)
    rows_ = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    rmask = rows_ < M
    cmask = cols < N
    mask = rmask[:, None] & cmask[None, :]
    r64 = rows_.to(tl.int64)
    x = tl.load(X + r64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    tl.store(Y + r64[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows_, rstd, mask=rmask)


@triton.jit
def _rms_bwd(
    X, W, DY, DX, RSTD, DW_PART, DW, COUNTS, M, N, stride_x, stride_dy, stride_dx, M_BUCKET,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PPS: tl.constexpr, FOLD: tl.constexpr, FAN_IN: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    for tile in range(pid, tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        rows_ = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        rmask = rows_ < M
        mask = rmask[:, None] & cmask[None, :]
        r64 = rows_.to(tl.int64)
        x = tl.load(X + r64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + r64[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + rows_, mask=rmask, other=0.0)
        xhat = x * rstd[:, None]
        wdy = dy * w[None, :]
        c = tl.sum(xhat * wdy, axis=1) / N
        dx = (wdy - xhat * c[:, None]) * rstd[:, None]
        tl.store(DX + r64[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * xhat, axis=0)
    _finish_partial(DW_PART, DW, COUNTS, pid, N, cols, cmask, dw, FOLD, FAN_IN)


@triton.jit
def _ln_fwd(
    X, W, B, Y, MEAN, RSTD, COUNTS, N_COUNTS, M, N, stride_x, stride_y, eps, M_BUCKET,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_COUNTS: tl.constexpr,
):  # fmt: skip
    _zero_counters(COUNTS, N_COUNTS, BLOCK_COUNTS)
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
    tl.store(Y + r64[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + rows_, mean, mask=rmask)
    tl.store(RSTD + rows_, rstd, mask=rmask)


@triton.jit
def _ln_bwd(
    X, W, DY, DX, MEAN, RSTD, DW_PART, DB_PART, DW, DB, COUNTS, DB_COUNTS, M, N, stride_x, stride_dy, stride_dx, M_BUCKET,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PPS: tl.constexpr,
    FOLD: tl.constexpr, FAN_IN: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    for tile in range(pid, tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        rows_ = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        rmask = rows_ < M
        mask = rmask[:, None] & cmask[None, :]
        r64 = rows_.to(tl.int64)
        x = tl.load(X + r64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + r64[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(MEAN + rows_, mask=rmask, other=0.0)
        rstd = tl.load(RSTD + rows_, mask=rmask, other=0.0)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        wdy = dy * w[None, :]
        c1 = tl.sum(xhat * wdy, axis=1) / N
        c2 = tl.sum(wdy, axis=1) / N
        dx = (wdy - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        tl.store(DX + r64[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * xhat, axis=0)
        if HAS_BIAS:
            db += tl.sum(dy, axis=0)
    _finish_partial(DW_PART, DW, COUNTS, pid, N, cols, cmask, dw, FOLD, FAN_IN)
    if HAS_BIAS:
        _finish_partial(DB_PART, DB, DB_COUNTS, pid, N, cols, cmask, db, FOLD, FAN_IN)


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
    block_p = min(triton.next_power_of_2(max(used, 1)), 1024)
    block_c = min(triton.next_power_of_2(n), max(8, 8192 // block_p))
    _sum_parts[(triton.cdiv(n, block_c),)](
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
    if exception is not None or nargs["FOLD"]:
        return
    dw_part = nargs["DW_PART"]
    used = _bwd_programs(nargs["M"], nargs, dw_part.device)
    _reduce_parts(dw_part, used, torch.float32, nargs["DB_PART"] if nargs.get("HAS_BIAS") else None)


def _bucket(m: int) -> int:
    return triton.next_power_of_2(max(m, 1))


def _fwd_default(width: int) -> dict:
    block_m, _, warps = _tile(width)
    return {"BLOCK_M": block_m, "num_warps": warps}


def _bwd_default(width: int) -> dict:
    block_m, block_n, warps = _tile(width)
    fan_in = _fan_in(block_n, warps)
    return {"BLOCK_M": block_m, "PPS": 4, "FOLD": bool(fan_in), "FAN_IN": fan_in, "num_warps": warps}


def _counters(device: torch.device) -> tuple[int, int]:
    """(counters one fold may use, their block): a fold's groups over all levels number fewer than its rows + 16."""
    per_fold = multiprocessors(device) * _MAX_PPS + 16
    return per_fold, triton.next_power_of_2(2 * per_fold)


def _partial_rows(m: int, device: torch.device) -> int:
    """Rows of a partial-sum buffer: one a program (at most ``_MAX_PPS`` a multiprocessor), then the fold's levels."""
    programs = max(1, min(m, multiprocessors(device) * _MAX_PPS))
    return 2 * programs + 16


def _bwd_programs(m: int, meta: dict, device: torch.device) -> int:
    return max(1, min(triton.cdiv(m, meta["BLOCK_M"]), multiprocessors(device) * meta["PPS"]))


_PRUNE = {"early_config_prune": _prune}
_PRUNE_BWD = {"early_config_prune": _prune_bwd}
_RMS_FWD = triton.autotune(_FWD_CONFIGS, key=_KEY, prune_configs_by=_PRUNE, do_bench=graph_timed)(_rms_fwd)
_RMS_BWD = triton.autotune(
    _BWD_CONFIGS, key=_KEY, prune_configs_by=_PRUNE_BWD, post_hook=_tune_with_reduction, do_bench=graph_timed
)(_rms_bwd)
_LN_FWD = triton.autotune(_FWD_CONFIGS, key=_KEY, prune_configs_by=_PRUNE, do_bench=graph_timed)(_ln_fwd)
_LN_BWD = triton.autotune(
    _BWD_CONFIGS, key=_KEY, prune_configs_by=_PRUNE_BWD, post_hook=_tune_with_reduction, do_bench=graph_timed
)(_ln_bwd)


class RMSNormFunction(torch.autograd.Function):
    """y = x / sqrt(mean(x^2) + eps) * w over the last dimension; any leading shape and strides."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        n = x.shape[-1]
        x2 = rows(x, n)
        m = x2.shape[0]
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        rstd = torch.empty(m, dtype=torch.float32, device=x.device)
        per_fold, block_counts = _counters(x.device)
        counters = torch.empty(2 * per_fold, dtype=torch.int32, device=x.device)
        if m > 0:
            launch(
                _rms_fwd, _RMS_FWD, lambda meta: (triton.cdiv(m, meta["BLOCK_M"]),), _fwd_default(n),
                x2, weight, y, rstd, counters, counters.numel(), m, n, x2.stride(0), n, eps, _bucket(m),
                BLOCK_N=triton.next_power_of_2(n), BLOCK_COUNTS=block_counts,
            )  # fmt: skip
        ctx.save_for_backward(x2, weight, rstd, counters)
        ctx.x_shape = x.shape
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        x2, weight, rstd, counters = ctx.saved_tensors
        m, n = x2.shape
        dy2 = rows(dy, n)
        dx = torch.empty((m, n), dtype=x2.dtype, device=x2.device)
        device = x2.device
        dw_part = torch.empty((_partial_rows(m, device), n), dtype=torch.float32, device=device)
        dw = torch.empty_like(weight)
        if m > 0:
            meta = launch(
                _rms_bwd, _RMS_BWD, lambda meta: (_bwd_programs(m, meta, device),), _bwd_default(n),
                x2, weight, dy2, dx, rstd, dw_part, dw, counters, m, n, x2.stride(0), dy2.stride(0), n, _bucket(m),
                BLOCK_N=triton.next_power_of_2(n),
            )  # fmt: skip
            if not meta["FOLD"]:
                dw, _ = _reduce_parts(dw_part, _bwd_programs(m, meta, device), weight.dtype)
        else:
            dw = torch.zeros_like(weight)
        return dx.view(ctx.x_shape), dw if ctx.needs_input_grad[1] else None, None


class LayerNormFunction(torch.autograd.Function):
    """y = (x - mean) / sqrt(var + eps) * w + b over the last dimension; any leading shape and strides."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
        n = x.shape[-1]
        x2 = rows(x, n)
        m = x2.shape[0]
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        mean = torch.empty(m, dtype=torch.float32, device=x.device)
        rstd = torch.empty(m, dtype=torch.float32, device=x.device)
        per_fold, block_counts = _counters(x.device)
        counters = torch.empty(2 * per_fold, dtype=torch.int32, device=x.device)
        if m > 0:
            launch(
                _ln_fwd, _LN_FWD, lambda meta: (triton.cdiv(m, meta["BLOCK_M"]),), _fwd_default(n),
                x2, weight, bias if bias is not None else weight, y, mean, rstd, counters, counters.numel(),
                m, n, x2.stride(0), n, eps, _bucket(m),
                HAS_BIAS=bias is not None, BLOCK_N=triton.next_power_of_2(n), BLOCK_COUNTS=block_counts,
            )  # fmt: skip
        ctx.save_for_backward(x2, weight, mean, rstd, counters)
        ctx.x_shape = x.shape
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, None]:
        x2, weight, mean, rstd, counters = ctx.saved_tensors
        m, n = x2.shape
        dy2 = rows(dy, n)
        dx = torch.empty((m, n), dtype=x2.dtype, device=x2.device)
        device = x2.device
        parts = _partial_rows(m, device)
        dw_part = torch.empty((parts, n), dtype=torch.float32, device=device)
        db_part = torch.empty((parts if ctx.has_bias else 1, n), dtype=torch.float32, device=device)
        dw = torch.empty_like(weight)
        db = torch.empty_like(weight) if ctx.has_bias else None
        half = counters.numel() // 2  # dw folds with the first half of the counters, db with the second
        if m > 0:
            meta = launch(
                _ln_bwd, _LN_BWD, lambda meta: (_bwd_programs(m, meta, device),), _bwd_default(n),
                x2, weight, dy2, dx, mean, rstd, dw_part, db_part, dw, db if db is not None else dw,
                counters, counters[half:], m, n, x2.stride(0), dy2.stride(0), n, _bucket(m),
                HAS_BIAS=ctx.has_bias, BLOCK_N=triton.next_power_of_2(n),
            )  # fmt: skip
            if not meta["FOLD"]:
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
        )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of ``x`` over its last dimension (differentiable in x and weight)."""
    return RMSNormFunction.apply(x, weight, eps)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """LayerNorm of ``x`` over its last dimension (differentiable in x, weight and bias)."""
    return LayerNormFunction.apply(x, weight, bias, eps)
