"""SwiGLU forward and backward that also do the fp8 cast of what they write, for the fp8 GEMM that reads it next.

Why: in an fp8 MLP (fc1 -> SwiGLU -> fc2) the SwiGLU output is fc2's input, and the SwiGLU backward's output is
fc1's output gradient; each is then cast for an fp8 GEMM, which reads the whole tensor again: per-tensor current
scaling reads it twice (an amax pass, then the cast), delayed scaling once. These two tensors are the MLP's
widest (the SwiGLU width, twice it for the gradient): about half the bytes of every fp8 cast in a Llama-style
layer. Here the SwiGLU kernel, which has the values in registers anyway, does that work as it writes them:
- current scaling (``CAST=False``): the tensor's amax, ``atomic_max``-ed into a slot; the cast kernel then reads
  it instead of running its own amax pass;
- delayed scaling (``CAST=True``): the scale is known before the tensor exists (from the amax history), so the
  kernel writes the fp8 copy and its transpose itself (``fp8_cast``'s arithmetic, the same bytes) and the amax;
  no cast pass is left.
The bf16 output is still written (autograd and megatron hand it on; a forward hook may read it): what goes is
the re-reading.

How: 2-D tiles [BLOCK_M rows, BLOCK_F columns of each half] (the transposed copy is written tile by tile, as in
``fp8_cast``). Every value is rounded to the output dtype first and the amax and fp8 bytes come from the rounded
value: exactly what a cast of the written tensor computes (checked bit for bit against ``swiglu`` followed by
``fp8_cast`` in Triton's interpreter, ``tests/impls/test_flaggems_fp8.py``).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from . import _LEAN, cdiv, launch
from .fp8_cast import _HARDWARE, FORMATS, _scaled_bytes
from .swiglu import _halves

__all__ = ["TILES", "backward", "forward", "set_tiles"]


def _tile(name: str, default: str) -> dict[str, int]:
    """``BLOCK_M,BLOCK_F,num_warps`` from the environment variable ``name`` (else ``default``)."""
    text = os.environ.get(name, default)
    try:
        bm, bf, warps = (int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected BLOCK_M,BLOCK_F,num_warps (e.g. 32,128,4)") from None
    if any(v <= 0 or v & (v - 1) for v in (bm, bf, warps)):
        raise ValueError(f"{name}={text!r}: every value must be a power of two")
    return {"BLOCK_M": bm, "BLOCK_F": bf, "num_warps": warps}


# [rows, columns of each half] a program, and warps: 32x128 with 8 warps was the fastest or within 1% of it, forward and
# backward, current and delayed, of 10 candidates on an H200 and two H100s (``bench/gpu_fp8_ops.py --sweep-swiglu``;
# docs/gpu_runs_h1*/fp8_swiglu_2026-12-06/sweep_swiglu_*.json). FL_GEMS_FP8_SWIGLU_TILE / FL_GEMS_FP8_SWIGLU_BWD_TILE
# override them (the sweep prints the fastest pair for a card).
TILES = {
    "fwd": _tile("FL_GEMS_FP8_SWIGLU_TILE", "32,128,8"),
    "bwd": _tile("FL_GEMS_FP8_SWIGLU_BWD_TILE", "32,128,8"),
}


def set_tiles(fwd: tuple[int, int, int] | None = None, bwd: tuple[int, int, int] | None = None) -> None:
    """Use other tiles from now on (the bench's sweep)."""
    for key, tile in (("fwd", fwd), ("bwd", bwd)):
        if tile is not None:
            TILES[key] = {"BLOCK_M": tile[0], "BLOCK_F": tile[1], "num_warps": tile[2]}
    _LEAN.clear()  # a repeated launch keeps its compiled kernel and constexprs: drop them


@triton.jit
def _swiglu_fp8_fwd(
    Y, BIAS, OUT, Q, QT, SCALE, SCALE_INV, AMAX, M, F, stride_y, FP8_MAX,
    HAS_BIAS: tl.constexpr, CAST: tl.constexpr, WRITE_QT: tl.constexpr,
    MANT: tl.constexpr, EBIAS: tl.constexpr, EMIN: tl.constexpr, HW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    pid_m, pid_f = tl.program_id(0), tl.program_id(1)
    r = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    c = (pid_f * BLOCK_F + tl.arange(0, BLOCK_F)).to(tl.int64)
    mask = (r < M)[:, None] & (c < F)[None, :]
    a, g = _halves(Y, BIAS, r, c, mask, F, stride_y, HAS_BIAS)
    out = (a * tl.sigmoid(a) * g).to(OUT.dtype.element_ty)
    tl.store(OUT + r[:, None] * F + c[None, :], out, mask=mask)
    x = tl.where(mask, out.to(tl.float32), 0.0)  # what a cast reading OUT reads
    tl.atomic_max(AMAX, tl.max(tl.max(tl.abs(x), axis=1), axis=0))
    if CAST:
        scale = tl.load(SCALE)
        q = _scaled_bytes(x, scale, FP8_MAX, MANT, EBIAS, EMIN, HW)
        tl.store(Q + r[:, None] * F + c[None, :], q, mask=mask)
        if WRITE_QT:
            tl.store(QT + c[:, None] * M + r[None, :], tl.trans(q), mask=tl.trans(mask))
        if pid_m == 0 and pid_f == 0:
            tl.store(SCALE_INV, tl.math.div_rn(1.0, scale))


@triton.jit
def _swiglu_fp8_bwd(
    Y, BIAS, DOUT, DY, Q, QT, SCALE, SCALE_INV, AMAX, M, F, stride_y, stride_dout, FP8_MAX,
    HAS_BIAS: tl.constexpr, CAST: tl.constexpr, WRITE_QT: tl.constexpr,
    MANT: tl.constexpr, EBIAS: tl.constexpr, EMIN: tl.constexpr, HW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    pid_m, pid_f = tl.program_id(0), tl.program_id(1)
    r = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    c = (pid_f * BLOCK_F + tl.arange(0, BLOCK_F)).to(tl.int64)
    mask = (r < M)[:, None] & (c < F)[None, :]
    a, g = _halves(Y, BIAS, r, c, mask, F, stride_y, HAS_BIAS)
    dout = tl.load(DOUT + r[:, None] * stride_dout + c[None, :], mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(a)
    da = (dout * g * sig * (1.0 + a * (1.0 - sig))).to(DY.dtype.element_ty)
    dg = (dout * a * sig).to(DY.dtype.element_ty)
    width = 2 * F
    dst = DY + r[:, None] * width + c[None, :]
    tl.store(dst, da, mask=mask)
    tl.store(dst + F, dg, mask=mask)
    xa = tl.where(mask, da.to(tl.float32), 0.0)
    xg = tl.where(mask, dg.to(tl.float32), 0.0)
    tile_max = tl.maximum(tl.max(tl.max(tl.abs(xa), axis=1), axis=0), tl.max(tl.max(tl.abs(xg), axis=1), axis=0))
    tl.atomic_max(AMAX, tile_max)
    if CAST:
        scale = tl.load(SCALE)
        qa = _scaled_bytes(xa, scale, FP8_MAX, MANT, EBIAS, EMIN, HW)
        qg = _scaled_bytes(xg, scale, FP8_MAX, MANT, EBIAS, EMIN, HW)
        qdst = Q + r[:, None] * width + c[None, :]
        tl.store(qdst, qa, mask=mask)
        tl.store(qdst + F, qg, mask=mask)
        if WRITE_QT:
            tdst = QT + c[:, None] * M + r[None, :]
            tl.store(tdst, tl.trans(qa), mask=tl.trans(mask))
            tl.store(tdst + F * M, tl.trans(qg), mask=tl.trans(mask))
        if pid_m == 0 and pid_f == 0:
            tl.store(SCALE_INV, tl.math.div_rn(1.0, scale))


def _grid(m: int, half: int):
    return lambda meta: (cdiv(m, meta["BLOCK_M"]), cdiv(half, meta["BLOCK_F"]))


def _cast_args(
    dtype: torch.dtype, q: torch.Tensor | None, qt: torch.Tensor | None, fallback: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, float, dict]:
    fp8_max, mant, ebias, emin = FORMATS[dtype]
    first = q.view(torch.uint8) if q is not None else fallback
    second = qt.view(torch.uint8) if qt is not None else first
    flags = {"CAST": q is not None, "WRITE_QT": qt is not None, "MANT": mant, "EBIAS": ebias, "EMIN": emin}
    return first, second, fp8_max, {**flags, "HW": _HARDWARE[0]}


def forward(
    y: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    *,
    dtype: torch.dtype,
    amax: torch.Tensor,
    scale: torch.Tensor | None = None,
    scale_inv: torch.Tensor | None = None,
    q: torch.Tensor | None = None,
    qt: torch.Tensor | None = None,
) -> None:
    """``out`` [M, F] = silu(a + bias_a) * (g + bias_g) of ``y`` [M, 2F] (unit last stride); ``amax`` (an fp32 slot
    holding 0) becomes max |out|. With ``q`` (delayed scaling): ``q`` [M, F] (and ``qt`` [F, M]) the fp8 ``dtype``
    copies of ``out`` at ``scale`` (a 1-element slot), ``scale_inv`` = 1 / scale."""
    m, width = y.shape
    half = width // 2
    if not (m and half):
        return
    first, second, fp8_max, flags = _cast_args(dtype, q, qt, out)
    launch(
        _swiglu_fp8_fwd, None, _grid(m, half), TILES["fwd"],
        y, bias if bias is not None else y, out, first, second,
        scale if scale is not None else amax, scale_inv if scale_inv is not None else amax, amax,
        m, half, y.stride(0), fp8_max, HAS_BIAS=bias is not None, **flags,
    )  # fmt: skip


def backward(
    y: torch.Tensor,
    bias: torch.Tensor | None,
    dout: torch.Tensor,
    dy: torch.Tensor,
    *,
    dtype: torch.dtype,
    amax: torch.Tensor,
    scale: torch.Tensor | None = None,
    scale_inv: torch.Tensor | None = None,
    q: torch.Tensor | None = None,
    qt: torch.Tensor | None = None,
) -> None:
    """``dy`` [M, 2F] (contiguous): the SwiGLU's input gradient from ``dout`` [M, F]; ``amax`` becomes max |dy|; with
    ``q`` (delayed scaling) ``q`` [M, 2F] and ``qt`` [2F, M] the fp8 copies of ``dy`` at ``scale``."""
    m, width = y.shape
    half = width // 2
    if not (m and half):
        return
    first, second, fp8_max, flags = _cast_args(dtype, q, qt, dy)
    launch(
        _swiglu_fp8_bwd, None, _grid(m, half), TILES["bwd"],
        y, bias if bias is not None else y, dout, dy, first, second,
        scale if scale is not None else amax, scale_inv if scale_inv is not None else amax, amax,
        m, half, y.stride(0), dout.stride(0), fp8_max, HAS_BIAS=bias is not None, **flags,
    )  # fmt: skip
