"""Casting to fp8 for the fp8 GEMMs: amax, scale, cast and the transposed copy in one pass where it can.

Why: an fp8 GEMM on Hopper (``torch._scaled_mm``, cuBLASLt) takes its first operand row-major
and its second column-major. A linear layer's three GEMMs read each of x, w and dy once in each
orientation: forward ``x @ w.T`` (x row-major, w as stored), dgrad ``dy @ w`` (w transposed),
wgrad ``dy.T @ x`` (both transposed). Casting with torch (``(x * s).clamp().to(fp8)``) and then
``.t().contiguous()`` reads x twice and writes it three times; here one kernel reads x once and
writes the fp8 copy and, where asked, its transpose (TE's ``fp8_cast_transpose_fused``).

How: a 2-D grid of [BLOCK_M, BLOCK_N] tiles.
- Per-tensor scale ("current", the ``tensorwise`` recipe): :func:`amax` first (one read,
  ``atomic_max`` of each tile's max |x| into an fp32 slot: a max is exact in any order), then
  :func:`cast` with ``MODE=0`` computes ``scale = FP8_MAX / amax * 2**-margin`` itself from
  that slot (IEEE division, ``div_rn``: the same fp32 value torch computes).
- Given scale ("delayed" recipe): ``MODE=1`` reads the scale from its slot and records this
  tensor's amax (``atomic_max`` into the amax-history row the caller zeroed).
- Blocks (the ``blockwise`` recipe, DeepSeek-V3's tiles): :func:`cast_1x128` gives each row's
  128 columns their own scale (activations and gradients), and the transposed copy each
  column's 128 rows theirs (what the weight-gradient GEMM contracts over);
  :func:`cast_128x128` gives each 128x128 block one scale (weights). Scales are powers of
  two (TE's default for block scaling: dequantizing is exact). Scale tensors are written in the
  layout cuBLASLt's block-scaled GEMMs read (``[blocks, rows]`` memory for 1x128: "outer-dim
  major").

The fp8 bytes are stored through a ``uint8`` view. On the GPU they come from the hardware's
conversion (``cvt.rn.satfinite``: round to nearest even, two values an instruction); in Triton's
CPU interpreter, whose own fp8 conversion rounds ties away from zero and misrounds e5m2, from
integer arithmetic on the fp32 bits (round to nearest even, subnormals included). Both give the
bytes torch's ``.to(torch.float8_*)`` gives (the interpreter's in the CPU tests, the GPU's in the
GPU test). The integer path was the GPU's too until an H200 timed both (``bench/gpu_fp8_ops.py
--sweep-cast``): at the same tile the hardware conversion made the casts 24% faster. Inputs are
clamped to the format's largest finite value first (saturation, as TE).

Scale tensors hold the *decode* factor (``1 / scale``: what the GEMM multiplies by), as
``torch._scaled_mm`` takes them.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .._runtime import interpreting
from . import _LEAN, cdiv, launch

__all__ = ["FORMATS", "TILE", "amax", "cast", "cast_1x128", "cast_128x128", "set_tile", "use_hardware_conversion"]

# (largest finite value, mantissa bits, exponent bias, smallest normal exponent) per fp8 dtype
FORMATS: dict[torch.dtype, tuple[float, int, int, int]] = {
    torch.float8_e4m3fn: (448.0, 3, 7, -6),
    torch.float8_e5m2: (57344.0, 2, 15, -14),
}
_BLOCK = {"BLOCK": 128, "num_warps": 16}  # 32 elements a thread: a 128x128 tile, two orientations


def _tile(text: str) -> dict[str, int]:
    """``"BLOCK_M,BLOCK_N,num_warps"`` as the per-tensor kernels' launch config."""
    try:
        bm, bn, warps = (int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"FL_GEMS_FP8_CAST_TILE={text!r}: expected BLOCK_M,BLOCK_N,num_warps (e.g. 64,128,8)"
        ) from None
    if any(v <= 0 or v & (v - 1) for v in (bm, bn, warps)):
        raise ValueError(f"FL_GEMS_FP8_CAST_TILE={text!r}: every value must be a power of two")
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps}


# The per-tensor kernels' tile: 64x128 with 4 warps was the fastest of 15 candidates on an H200 (delayed and current
# scaling at the 1.31B's shapes; docs/gpu_runs_h200/fp8_casts_2026-12-05/sweep.json). FL_GEMS_FP8_CAST_TILE
# overrides it (``bench/gpu_fp8_ops.py --sweep-cast`` times the candidates on a card and prints the fastest).
TILE = _tile(os.environ.get("FL_GEMS_FP8_CAST_TILE", "64,128,4"))
# The GPU's own fp8 conversion; FL_GEMS_FP8_CAST_CONVERT=integer: the interpreter's integer rounding on the GPU too
# (the same bytes, slower: for the bench's before/after, or a card whose conversion is in doubt)
_CONVERT = os.environ.get("FL_GEMS_FP8_CAST_CONVERT", "hardware")
if _CONVERT not in ("hardware", "integer"):
    raise ValueError(f"FL_GEMS_FP8_CAST_CONVERT={_CONVERT!r}: expected 'hardware' (the default) or 'integer'")
# (decided here, not per cast: interpreting() reads os.environ, microseconds on every linear call)
_HARDWARE = [_CONVERT == "hardware" and not interpreting()]


def set_tile(block_m: int, block_n: int, num_warps: int) -> None:
    """Use another tile for the per-tensor kernels from now on (the bench's sweep)."""
    TILE.update(_tile(f"{block_m},{block_n},{num_warps}"))
    _LEAN.clear()  # a repeated launch keeps its compiled kernel and grid: drop them


def use_hardware_conversion(on: bool) -> None:
    """The GPU's ``cvt`` (default) or the integer rounding (the interpreter's path) on the GPU too (the bench)."""
    _HARDWARE[0] = on and not interpreting()


@triton.jit
def _fp8_bits(v, MANT: tl.constexpr, BIAS: tl.constexpr, EMIN: tl.constexpr):
    """The fp8 byte (as int32) of ``v`` (fp32, already within the format's range), rounded to nearest even."""
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 31) & 1
    mag = bits & 0x7FFFFFFF
    shift: tl.constexpr = 23 - MANT
    # normal numbers: round the fp32 mantissa to MANT bits (a carry moves into the exponent), rebias
    rounded = (mag + ((1 << (shift - 1)) - 1) + ((mag >> shift) & 1)) >> shift
    normal = rounded - ((127 - BIAS) << MANT)
    # below the smallest normal: a multiple of the subnormal step, rounded to nearest even by the
    # 1.5 * 2**23 trick (exact: the scaled value is < 2**MANT + 1)
    steps = tl.minimum(tl.abs(v) * (2.0 ** (MANT - EMIN)), 1048576.0)  # (normal values: unused, kept in range)
    sub = ((steps + 12582912.0) - 12582912.0).to(tl.int32)
    code = tl.where(mag < ((127 + EMIN) << 23), sub, normal)
    return (sign << 7) | code


@triton.jit
def _fp8_bytes(v, MANT: tl.constexpr, BIAS: tl.constexpr, EMIN: tl.constexpr, HW: tl.constexpr):
    """The fp8 bytes (uint8) of ``v`` (fp32, within the format's range), rounded to nearest even.

    ``HW``: the GPU's own conversion (``cvt.rn.satfinite``, two values an instruction); else the integer path
    above (the interpreter, whose conversion misrounds). Both give torch's bytes (checked on the GPU)."""
    if HW:
        if MANT == 3:
            q = v.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
        else:
            q = v.to(tl.float8e5).to(tl.uint8, bitcast=True)
    else:
        q = _fp8_bits(v, MANT, BIAS, EMIN).to(tl.uint8)
    return q


@triton.jit
def _scaled_bytes(x, scale, FP8_MAX, MANT: tl.constexpr, BIAS: tl.constexpr, EMIN: tl.constexpr, HW: tl.constexpr):
    """The fp8 bytes of ``x * scale`` (fp32), saturated at the format's largest finite value."""
    return _fp8_bytes(tl.minimum(tl.maximum(x * scale, -FP8_MAX), FP8_MAX), MANT, BIAS, EMIN, HW)


@triton.jit
def _amax_kernel(X, AMAX, M, N, stride_x, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    r = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (r < M)[:, None] & (c < N)[None, :]
    x = tl.load(X + r[:, None] * stride_x + c[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.atomic_max(AMAX, tl.max(tl.max(tl.abs(x), axis=1), axis=0))


@triton.jit
def _cast_kernel(
    X, Q, QT, SCALE, SCALE_INV, AMAX, M, N, stride_x, FP8_MAX, MARGIN,
    MODE: tl.constexpr, MANT: tl.constexpr, BIAS: tl.constexpr, EMIN: tl.constexpr, HW: tl.constexpr,
    WRITE_Q: tl.constexpr, WRITE_QT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    r = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    c = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    mask = (r < M)[:, None] & (c < N)[None, :]
    x = tl.load(X + r[:, None] * stride_x + c[None, :], mask=mask, other=0.0).to(tl.float32)
    if MODE == 0:  # current scaling: the scale from this tensor's amax (computed by _amax_kernel)
        amax = tl.load(AMAX)
        scale = tl.where(amax > 0.0, tl.math.div_rn(FP8_MAX, tl.maximum(amax, 1e-30)) * MARGIN, 1.0)
    else:  # delayed scaling: the scale from the history; record this tensor's amax
        scale = tl.load(SCALE)
        tl.atomic_max(AMAX, tl.max(tl.max(tl.abs(x), axis=1), axis=0))
    q = _scaled_bytes(x, scale, FP8_MAX, MANT, BIAS, EMIN, HW)
    if WRITE_Q:
        tl.store(Q + r[:, None] * N + c[None, :], q, mask=mask)
    if WRITE_QT:
        tl.store(QT + c[:, None] * M + r[None, :], tl.trans(q), mask=tl.trans(mask))
    if pid_m == 0 and pid_n == 0:
        tl.store(SCALE_INV, tl.math.div_rn(1.0, scale))
        if MODE == 0:
            tl.store(SCALE, scale)


@triton.jit
def _pow2_scale(amax, FP8_MAX, MARGIN):
    """The largest power of two s with amax * s <= FP8_MAX * MARGIN (1 where amax is 0)."""
    s = tl.math.div_rn(FP8_MAX, tl.maximum(amax, 1e-30)) * MARGIN
    s = (s.to(tl.int32, bitcast=True) & 0x7F800000).to(tl.float32, bitcast=True)  # floor to a power of two
    return tl.where(amax > 0.0, s, 1.0)


@triton.jit
def _cast_1x128_kernel(
    X, Q, S, QT, ST, M, N, stride_x, FP8_MAX, MARGIN,
    MANT: tl.constexpr, BIAS: tl.constexpr, EMIN: tl.constexpr, HW: tl.constexpr, WRITE_QT: tl.constexpr,
    BLOCK: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    r = (pid_m * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    c = (pid_n * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    mask = (r < M)[:, None] & (c < N)[None, :]
    x = tl.load(X + r[:, None] * stride_x + c[None, :], mask=mask, other=0.0).to(tl.float32)
    ax = tl.abs(x)
    # each row's 128 columns: scale per (row, column block); S is [column blocks, M] in memory
    s_row = _pow2_scale(tl.max(ax, axis=1), FP8_MAX, MARGIN)
    tl.store(
        Q + r[:, None] * N + c[None, :], _scaled_bytes(x, s_row[:, None], FP8_MAX, MANT, BIAS, EMIN, HW), mask=mask
    )
    tl.store(S + pid_n * M + r, tl.math.div_rn(1.0, s_row), mask=r < M)
    if WRITE_QT:
        # each column's 128 rows (the transposed copy's 1x128 tiles): ST is [row blocks, N] in memory
        s_col = _pow2_scale(tl.max(ax, axis=0), FP8_MAX, MARGIN)
        qt = _scaled_bytes(x, s_col[None, :], FP8_MAX, MANT, BIAS, EMIN, HW)
        tl.store(QT + c[:, None] * M + r[None, :], tl.trans(qt), mask=tl.trans(mask))
        tl.store(ST + pid_m * N + c, tl.math.div_rn(1.0, s_col), mask=c < N)


@triton.jit
def _cast_128x128_kernel(
    X, Q, S, QT, ST, M, N, stride_x, stride_s, stride_st, FP8_MAX, MARGIN,
    MANT: tl.constexpr, BIAS: tl.constexpr, EMIN: tl.constexpr, HW: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    r = (pid_m * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    c = (pid_n * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    mask = (r < M)[:, None] & (c < N)[None, :]
    x = tl.load(X + r[:, None] * stride_x + c[None, :], mask=mask, other=0.0).to(tl.float32)
    s = _pow2_scale(tl.max(tl.max(tl.abs(x), axis=1), axis=0), FP8_MAX, MARGIN)
    q = _scaled_bytes(x, s, FP8_MAX, MANT, BIAS, EMIN, HW)
    tl.store(Q + r[:, None] * N + c[None, :], q, mask=mask)
    tl.store(QT + c[:, None] * M + r[None, :], tl.trans(q), mask=tl.trans(mask))
    inv = tl.math.div_rn(1.0, s)
    tl.store(S + pid_m * stride_s + pid_n, inv)
    tl.store(ST + pid_n * stride_st + pid_m, inv)


def _format(dtype: torch.dtype) -> tuple[float, int, int, int]:
    if dtype not in FORMATS:
        raise ValueError(f"no fp8 format {dtype}")
    return FORMATS[dtype]


def _grid(m: int, n: int, bm: int, bn: int):
    return lambda meta: (cdiv(m, bm), cdiv(n, bn))


def amax(x: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` (an fp32 slot holding 0 or less) becomes max(out, max |x|); ``x`` 2-D with unit last stride."""
    m, n = x.shape
    if m and n:
        launch(_amax_kernel, None, _grid(m, n, TILE["BLOCK_M"], TILE["BLOCK_N"]), TILE, x, out, m, n, x.stride(0))


def cast(
    x: torch.Tensor,
    dtype: torch.dtype,
    *,
    scale: torch.Tensor,
    scale_inv: torch.Tensor,
    amax_slot: torch.Tensor,
    current: bool,
    margin: int = 0,
    q: torch.Tensor | None = None,
    qt: torch.Tensor | None = None,
) -> None:
    """Cast 2-D ``x`` to fp8 ``dtype`` into ``q`` ([M, N]) and/or ``qt`` ([N, M]), per-tensor scale.

    ``current``: the scale from ``amax_slot`` (filled by :func:`amax`), written to ``scale``;
    else ``scale`` is read and this tensor's amax is max-ed into ``amax_slot``. ``scale_inv``
    gets ``1 / scale``. Every slot is a 1-element fp32 tensor on ``x``'s device.
    """
    fp8_max, mant, bias, emin = _format(dtype)
    m, n = x.shape
    first = q if q is not None else qt
    if first is None or not (m and n):
        scale_inv.fill_(1.0)
        return
    second = qt if qt is not None else first
    launch(
        _cast_kernel, None, _grid(m, n, TILE["BLOCK_M"], TILE["BLOCK_N"]), TILE,
        x, first.view(torch.uint8), second.view(torch.uint8),
        scale, scale_inv, amax_slot, m, n, x.stride(0), fp8_max, 2.0 ** -margin,
        MODE=0 if current else 1, MANT=mant, BIAS=bias, EMIN=emin, HW=_HARDWARE[0], WRITE_Q=q is not None, WRITE_QT=qt is not None,
    )  # fmt: skip


def cast_1x128(
    x: torch.Tensor, dtype: torch.dtype, *, margin: int = 0, transposed: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Block-scaled cast of 2-D ``x`` [M, N]: (q, s, qt, st).

    q [M, N] with a scale per (row, 128 columns): s is [M, ceil(N/128)] with strides (1, M);
    with ``transposed``, qt [N, M] with a scale per (column, 128 rows): st [N, ceil(M/128)],
    strides (1, N). Scales are decode factors.
    """
    fp8_max, mant, bias, emin = _format(dtype)
    m, n = x.shape
    block = _BLOCK["BLOCK"]
    dev = x.device
    q = torch.empty((m, n), dtype=dtype, device=dev)
    s = torch.empty((cdiv(n, block), m), dtype=torch.float32, device=dev)
    qt = torch.empty((n, m), dtype=dtype, device=dev) if transposed else None
    st = torch.empty((cdiv(m, block), n), dtype=torch.float32, device=dev) if transposed else None
    if m and n:
        launch(
            _cast_1x128_kernel, None, _grid(m, n, block, block), _BLOCK,
            x, q.view(torch.uint8), s, (qt if qt is not None else q).view(torch.uint8), st if st is not None else s,
            m, n, x.stride(0), fp8_max, 2.0 ** -margin, MANT=mant, BIAS=bias, EMIN=emin, HW=_HARDWARE[0],
            WRITE_QT=transposed,
        )  # fmt: skip
    return q, s.t(), qt, (st.t() if st is not None else None)


def cast_128x128(
    x: torch.Tensor, dtype: torch.dtype, *, margin: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Block-scaled cast of a 2-D weight [M, N], one scale per 128x128 block: (q, s, qt, st).

    s is [ceil(M/128), ceil(N/128)] and st its transpose, each a slice of a buffer whose rows are
    padded to a multiple of 4 (cuBLASLt's layout for 128x128 block scales); qt is q transposed.
    """
    fp8_max, mant, bias, emin = _format(dtype)
    m, n = x.shape
    block = _BLOCK["BLOCK"]
    bm, bn = cdiv(m, block), cdiv(n, block)
    dev = x.device
    q = torch.empty((m, n), dtype=dtype, device=dev)
    qt = torch.empty((n, m), dtype=dtype, device=dev)
    s = torch.ones((bm, -(-bn // 4) * 4), dtype=torch.float32, device=dev)
    st = torch.ones((bn, -(-bm // 4) * 4), dtype=torch.float32, device=dev)
    if m and n:
        launch(
            _cast_128x128_kernel, None, _grid(m, n, block, block), _BLOCK,
            x, q.view(torch.uint8), s, qt.view(torch.uint8), st, m, n, x.stride(0), s.stride(0), st.stride(0),
            fp8_max, 2.0 ** -margin, MANT=mant, BIAS=bias, EMIN=emin, HW=_HARDWARE[0],
        )  # fmt: skip
    return q, s[:, :bn], qt, st[:, :bm]
