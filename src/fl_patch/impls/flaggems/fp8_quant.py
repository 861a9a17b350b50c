"""fp8 operands and the scaled GEMMs that multiply them: what the fp8 linear layers compute with.

Why: Transformer Engine's fp8 recipes reduce to two pieces, casting a bf16 tensor to fp8 with a
scale (per tensor, or per block) and a GEMM that multiplies two fp8 operands and applies their
scales in the epilogue (Hopper's fp8 tensor cores through cuBLASLt). torch exposes that GEMM
(``torch._scaled_mm``; block-scaled operands through ``torch.nn.functional.scaled_mm`` where
the installed torch has it), so no TE is needed for it.

How:
- :class:`Operand`: fp8 data, its decode scale(s) (``1 / scale``) and the scaling kind.
- ``quantize_*``: the cast, on the pack's Triton kernel (``kernels/fp8_cast.py``: one read of the
  input, the fp8 copy and its transpose written in the same pass) where it can run, else torch
  (the reference the kernel is checked against: the same bytes).
- :func:`scaled_mm`: ``a @ b`` with ``a`` row-major and ``b`` column-major, per-tensor or block
  scales. Per-tensor on ``torch._scaled_mm`` (also on the CPU, torch >= 2.13). Block-scaled on
  CUDA through torch's block-scaled GEMM, checked once per device against the dequantized
  product before it is trusted (:func:`blockwise_reason`); on the CPU the dequantized product in
  fp32 (an emulation, for tests).
- :func:`scaled_mm_add`: ``out += a @ b`` into an fp32 ``out`` (the weight gradient into megatron's ``main_grad``).
  Per-tensor operands on CUDA: cuBLASLt's GEMM adding in its epilogue (``cublaslt.py``), checked once per device
  against ``scaled_mm`` plus ``add_`` before it is trusted (:func:`accumulate_reason`); else that unfused form.
  ``FL_GEMS_FP8_WGRAD_ACCUMULATE=0``: the unfused form always (the bench's control).

Upstream reference: Transformer Engine 2.x ``Float8CurrentScaling``, ``DelayedScaling``,
``Float8BlockScaling`` (recipe semantics); DeepSeek-V3 (arXiv:2412.19437) section 3.3 (1x128
activation tiles, 128x128 weight blocks). When to drop: TransformerEngine (or TE-FL) installed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import cublaslt
from ._runtime import LOG, interpreting, kernel_unavailable

__all__ = [
    "BLOCK",
    "E4M3",
    "E5M2",
    "Operand",
    "accumulate_reason",
    "blockwise_reason",
    "dequantize",
    "fp8_max",
    "quantize_1x128",
    "quantize_128x128",
    "quantize_delayed",
    "quantize_tensorwise",
    "scale_slots",
    "scaled_mm",
    "scaled_mm_add",
]

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
BLOCK = 128  # the block size of the blockwise recipe (1x128 tiles, 128x128 blocks)
_MAX = {E4M3: 448.0, E5M2: 57344.0}


def fp8_max(dtype: torch.dtype) -> float:
    """The largest finite value of an fp8 dtype."""
    return _MAX[dtype]


@dataclass
class Operand:
    """An fp8 matrix and its decode scale(s).

    ``kind`` ``"tensor"``: ``scale_inv`` holds one value. ``"1x128"``: one per (row, 128 columns) of the matrix as
    quantized, [rows, ceil(cols / 128)]. ``"128x128"``: one per 128x128 block, [ceil(rows/128), ceil(cols/128)].
    :meth:`t` gives the transposed view (the column-major operand of a GEMM): a 128x128 scale transposes with it;
    a 1x128 scale stays as quantized (cuBLASLt reads a column-major 1x128 operand's scales per column), marked by
    ``transposed``.
    """

    data: torch.Tensor
    scale_inv: torch.Tensor
    kind: str = "tensor"
    transposed: bool = False

    def t(self) -> Operand:
        scale = self.scale_inv.t() if self.kind == "128x128" else self.scale_inv
        return Operand(self.data.t(), scale, self.kind, not self.transposed)


def _use_kernel(x: torch.Tensor) -> bool:
    return kernel_unavailable(x) is None and (x.is_cuda or interpreting())


def _rows(x: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


# --------------------------------------------------------------------------- per-tensor scales
def _scale_from_amax(amax: torch.Tensor, dtype: torch.dtype, margin: int) -> torch.Tensor:
    """``FP8_MAX / amax * 2**-margin`` in fp32 (1 where amax is 0): the value the kernel computes."""
    big = torch.full_like(amax, fp8_max(dtype))
    return torch.where(amax > 0, big / amax.clamp_min(1e-30) * (2.0**-margin), torch.ones_like(amax))


def _cast_reference(x2: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    limit = fp8_max(dtype)
    return (x2.float() * scale).clamp_(-limit, limit).to(dtype)


def scale_slots(device: torch.device) -> torch.Tensor:
    """The fp32 slots of one per-tensor cast: ``[scale_inv, amax, scale]``, zeroed.

    scale_inv first: cuBLASLt takes a scale pointer only 16-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED otherwise, seen
    on an H200 with CUDA 13), and a storage starts 256-byte aligned; amax and scale only the cast kernels read."""
    return torch.zeros(3, dtype=torch.float32, device=device)


def quantize_tensorwise(
    x: torch.Tensor,
    dtype: torch.dtype,
    margin: int = 0,
    *,
    rowwise: bool = True,
    transposed: bool = False,
    slots: torch.Tensor | None = None,
) -> tuple[Operand | None, Operand | None]:
    """Current (per-tensor) scaling: x's own amax sets the scale. Returns (x as [rows, cols], x transposed).

    ``slots`` (:func:`scale_slots`) whose amax the kernel that wrote ``x`` already set to max |x| (the SwiGLU's,
    ``kernels/swiglu_fp8.py``): no amax pass here."""
    x2 = _rows(x)
    m, n = x2.shape
    known = slots is not None
    if slots is None:
        slots = scale_slots(x2.device)
    scale_inv, amax, scale = slots[0:1], slots[1:2], slots[2:3]
    q = torch.empty((m, n), dtype=dtype, device=x2.device) if rowwise else None
    qt = torch.empty((n, m), dtype=dtype, device=x2.device) if transposed else None
    if _use_kernel(x2):
        from .kernels import fp8_cast

        if not known:
            fp8_cast.amax(x2, amax)
        fp8_cast.cast(
            x2, dtype, scale=scale, scale_inv=scale_inv, amax_slot=amax, current=True, margin=margin, q=q, qt=qt
        )
    else:
        if not known:
            amax.copy_(x2.abs().amax() if x2.numel() else torch.zeros((), device=x2.device))
        scale.copy_(_scale_from_amax(amax, dtype, margin))
        scale_inv.copy_(1.0 / scale)
        cast = _cast_reference(x2, scale, dtype)
        if q is not None:
            q.copy_(cast)
        if qt is not None:
            qt.copy_(cast.t())
    return (Operand(q, scale_inv) if q is not None else None), (Operand(qt, scale_inv) if qt is not None else None)


def quantize_delayed(
    x: torch.Tensor,
    dtype: torch.dtype,
    scale: torch.Tensor,
    amax_slot: torch.Tensor,
    *,
    rowwise: bool = True,
    transposed: bool = False,
) -> tuple[Operand | None, Operand | None]:
    """Delayed scaling: ``scale`` (a 1-element slot) was set from the amax history; this tensor's amax is
    max-ed into ``amax_slot`` (the history's newest row, zeroed by the caller)."""
    x2 = _rows(x)
    m, n = x2.shape
    scale_inv = torch.empty(1, dtype=torch.float32, device=x2.device)
    q = torch.empty((m, n), dtype=dtype, device=x2.device) if rowwise else None
    qt = torch.empty((n, m), dtype=dtype, device=x2.device) if transposed else None
    if _use_kernel(x2):
        from .kernels import fp8_cast

        fp8_cast.cast(x2, dtype, scale=scale, scale_inv=scale_inv, amax_slot=amax_slot, current=False, q=q, qt=qt)
    else:
        if x2.numel():
            amax_slot.copy_(torch.maximum(amax_slot, x2.abs().amax().float()))
        scale_inv.copy_(1.0 / scale)
        cast = _cast_reference(x2, scale, dtype)
        if q is not None:
            q.copy_(cast)
        if qt is not None:
            qt.copy_(cast.t())
    return (Operand(q, scale_inv) if q is not None else None), (Operand(qt, scale_inv) if qt is not None else None)


# --------------------------------------------------------------------------- block scales
def _pow2_decode(amax: torch.Tensor, dtype: torch.dtype, margin: int) -> torch.Tensor:
    """Decode factors of power-of-two scales (the kernel's ``_pow2_scale``): 1 / 2**floor(log2(max/amax))."""
    scale = fp8_max(dtype) / amax.clamp_min(1e-30) * (2.0**-margin)
    scale = (scale.view(torch.int32) & 0x7F800000).view(torch.float32)
    scale = torch.where(amax > 0, scale, torch.ones_like(scale))
    return 1.0 / scale


def _pad_to(x2: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    m, n = x2.shape
    return torch.nn.functional.pad(x2.float(), (0, cols - n, 0, rows - m))


def _ceil(a: int, b: int = BLOCK) -> int:
    return -(-a // b)


def _blocks_1x128(x2: torch.Tensor, dtype: torch.dtype, margin: int) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x2.shape
    nb = _ceil(n)
    xp = _pad_to(x2, m, nb * BLOCK).view(m, nb, BLOCK)
    decode = _pow2_decode(xp.abs().amax(-1), dtype, margin)  # [m, nb]
    limit = fp8_max(dtype)
    q = (xp / decode[..., None]).clamp_(-limit, limit).to(dtype).view(m, nb * BLOCK)[:, :n]
    return q.contiguous(), decode


def quantize_1x128(
    x: torch.Tensor, dtype: torch.dtype, margin: int = 0, *, transposed: bool = True
) -> tuple[Operand, Operand | None]:
    """1x128 tiles: x [M, N] with a scale per (row, 128 columns); its transpose [N, M] with a scale per (column,
    128 rows) (the weight-gradient GEMM contracts over rows). Power-of-two scales."""
    x2 = _rows(x)
    if _use_kernel(x2):
        from .kernels import fp8_cast

        q, s, qt, st = fp8_cast.cast_1x128(x2, dtype, margin=margin, transposed=transposed)
        return Operand(q, s, "1x128"), (Operand(qt, st, "1x128") if qt is not None and st is not None else None)
    q, s = _blocks_1x128(x2, dtype, margin)
    # the layout the kernel writes (and cuBLASLt reads): [blocks, rows] in memory
    rowwise = Operand(q, s.t().contiguous().t(), "1x128")
    if not transposed:
        return rowwise, None
    qt, st = _blocks_1x128(x2.t(), dtype, margin)
    return rowwise, Operand(qt, st.t().contiguous().t(), "1x128")


def quantize_128x128(w: torch.Tensor, dtype: torch.dtype, margin: int = 0) -> tuple[Operand, Operand]:
    """128x128 blocks of a weight [M, N]: (w, w transposed as a contiguous [N, M] copy), one scale a block."""
    w2 = _rows(w)
    if _use_kernel(w2):
        from .kernels import fp8_cast

        q, s, qt, st = fp8_cast.cast_128x128(w2, dtype, margin=margin)
        return Operand(q, s, "128x128"), Operand(qt, st, "128x128")
    m, n = w2.shape
    mb, nb = _ceil(m), _ceil(n)
    wp = _pad_to(w2, mb * BLOCK, nb * BLOCK).view(mb, BLOCK, nb, BLOCK)
    decode = _pow2_decode(wp.abs().amax(dim=(1, 3)), dtype, margin)  # [mb, nb]
    limit = fp8_max(dtype)
    q = (wp / decode[:, None, :, None]).clamp_(-limit, limit).to(dtype).view(mb * BLOCK, nb * BLOCK)[:m, :n]
    q = q.contiguous()
    return Operand(q, decode, "128x128"), Operand(q.t().contiguous(), decode.t().contiguous(), "128x128")


# --------------------------------------------------------------------------- dequantizing (references)
def _expand(scale: torch.Tensor, rows: int, cols: int, kind: str) -> torch.Tensor:
    if kind == "tensor":
        return scale.reshape(1, 1).expand(rows, cols)
    if kind == "1x128":
        return scale.repeat_interleave(BLOCK, dim=1)[:, :cols]
    return scale.repeat_interleave(BLOCK, dim=0)[:rows].repeat_interleave(BLOCK, dim=1)[:, :cols]


def dequantize(op: Operand) -> torch.Tensor:
    """The fp32 matrix ``op`` stands for."""
    if op.kind == "1x128" and op.transposed:
        return dequantize(Operand(op.data.t(), op.scale_inv, op.kind)).t()
    rows, cols = op.data.shape
    return op.data.float() * _expand(op.scale_inv.float(), rows, cols, op.kind)


# --------------------------------------------------------------------------- GEMMs
_PADDED_BLOCK_SCALES = [False]  # set by the device check: the 128x128 scales passed with their padded rows


def _block_scale(op: Operand) -> torch.Tensor:
    """``op``'s scales as the GEMM takes them: a 128x128 scale is a slice of a buffer whose rows are padded to a
    multiple of 4; where the device check found that torch wants the padded buffer, that is passed."""
    scale = op.scale_inv
    if op.kind == "128x128" and _PADDED_BLOCK_SCALES[0] and scale._base is not None:
        base = scale._base
        return base.t() if scale.stride(0) == 1 else base
    return scale


def _blockwise_cuda(a: Operand, b: Operand, out_dtype: torch.dtype) -> torch.Tensor:
    # no fast accumulation: cuBLASLt's block-scaled GEMM promotes its partial sums itself, and torch 2.11 refuses the
    # flag ("scaled_gemm doesn't support fast accum with 128x128 blockwise scaling", seen on an H200)
    a = Operand(a.data, _block_scale(a), a.kind, a.transposed)
    b = Operand(b.data, _block_scale(b), b.kind, b.transposed)
    functional = torch.nn.functional
    if hasattr(functional, "scaled_mm") and hasattr(functional, "ScalingType"):
        kinds = {"1x128": functional.ScalingType.BlockWise1x128, "128x128": functional.ScalingType.BlockWise128x128}
        return functional.scaled_mm(
            a.data, b.data, a.scale_inv, kinds[a.kind], b.scale_inv, kinds[b.kind],
            output_dtype=out_dtype, use_fast_accum=False,
        )  # fmt: skip
    # torch 2.9/2.10: _scaled_mm tells block scaling apart by the scales' shapes
    return torch._scaled_mm(a.data, b.data, a.scale_inv, b.scale_inv, out_dtype=out_dtype, use_fast_accum=False)


def scaled_mm(
    a: Operand, b: Operand, out_dtype: torch.dtype, *, fast_accum: bool = False, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``dequantize(a) @ dequantize(b)`` on the fp8 tensor cores; ``a`` row-major, ``b`` column-major."""
    if a.kind == "tensor" and b.kind == "tensor":
        if bias is not None and out_dtype == torch.float32:
            return torch._scaled_mm(a.data, b.data, a.scale_inv, b.scale_inv, out_dtype=out_dtype) + bias
        return torch._scaled_mm(
            a.data, b.data, a.scale_inv, b.scale_inv, bias=bias, out_dtype=out_dtype, use_fast_accum=fast_accum
        )
    if a.data.is_cuda:
        out = _blockwise_cuda(a, b, out_dtype)
    else:  # no block-scaled GEMM in torch's CPU build: the dequantized product in fp32
        out = (dequantize(a) @ dequantize(b)).to(out_dtype)
    return out if bias is None else out + bias


_block_ok: dict[int, str | None] = {}
_check_lock = threading.Lock()


def _once_per_device(
    results: dict[int, str | None], index: int, check: Callable[[torch.device], str | None]
) -> str | None:
    """``check`` of CUDA device ``index``, run once (under a lock: it runs GEMMs and synchronizes), then remembered."""
    if index not in results:
        with _check_lock:
            if index not in results:
                results[index] = check(torch.device("cuda", index))
    return results[index]


def _cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _check_blockwise(device: torch.device) -> str | None:
    """None if torch's block-scaled GEMM gives the dequantized product here (1x128 by 128x128, 1x128 by 1x128), with
    the 128x128 scales as sliced or, failing that, with their padded rows (torch releases differ on which)."""
    first = _check_blockwise_once(device)
    if first is None:
        return None
    _PADDED_BLOCK_SCALES[0] = True
    second = _check_blockwise_once(device)
    if second is None:
        return None
    _PADDED_BLOCK_SCALES[0] = False
    return f"{first}; with padded 128x128 scales: {second}"


def _check_blockwise_once(device: torch.device) -> str | None:
    generator = torch.Generator(device="cpu").manual_seed(0)
    m, n, k = 256, 384, 512
    x = (torch.randn(m, k, generator=generator) * torch.logspace(-2, 2, k)).to(device, torch.bfloat16)
    w = torch.randn(n, k, generator=generator).to(device, torch.bfloat16)
    g = torch.randn(m, n, generator=generator).to(device, torch.bfloat16)
    try:
        xq, xqt = quantize_1x128(x, E4M3)
        wq, wqt = quantize_128x128(w, E4M3)
        gq, gqt = quantize_1x128(g, E4M3)
        assert xqt is not None and gqt is not None
        pairs = (
            ("forward", xq, wq.t()),  # x @ w.T: 1x128 by 128x128
            ("dgrad", gq, wqt.t()),  # g @ w: 1x128 by 128x128
            ("wgrad", gqt, xqt.t()),  # g.T @ x: 1x128 by 1x128
        )
        for name, a, b in pairs:
            got = scaled_mm(a, b, torch.float32)
            want = dequantize(a).double() @ dequantize(b).double()
            error = ((got.double() - want).norm() / want.norm()).item()
            if not error < 1e-3:
                return f"torch's block-scaled GEMM ({name}) differs from the dequantized product (rel. {error:.2g})"
    except (RuntimeError, NotImplementedError, TypeError, ValueError, AssertionError) as exc:
        return f"torch {torch.__version__} has no block-scaled fp8 GEMM here: {str(exc).splitlines()[0][:200]}"
    return None


def blockwise_reason(device: torch.device) -> str | None:
    """Why the ``blockwise`` recipe cannot run on ``device`` (None: it can). Checked once per device."""
    if device.type != "cuda":
        return None  # the CPU emulation (tests)
    major, _ = torch.cuda.get_device_capability(device)
    if major != 9:
        return f"block-scaled fp8 GEMMs (1x128, 128x128) need a Hopper GPU (sm_90); this is sm_{major}x"
    return _once_per_device(_block_ok, _cuda_index(device), _check_blockwise)


# --------------------------------------------------------------------------- accumulating into an fp32 output
ACCUMULATE = os.environ.get("FL_GEMS_FP8_WGRAD_ACCUMULATE", "1") != "0"
_accumulate_ok: dict[int, str | None] = {}
_accumulate_said: set[str] = set()


def _check_accumulate(device: torch.device) -> str | None:
    """None if cuBLASLt's accumulating GEMM gives ``out + scaled_mm(a, b)`` here: a non-square problem in both
    operand orders of the ``hybrid`` wgrad (e5m2 gradient by e4m3 input) and e4m3 by e4m3, scales not 1."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    m, n, k = 64, 96, 160
    try:
        for a_dtype, b_dtype in ((E5M2, E4M3), (E4M3, E5M2), (E4M3, E4M3)):
            a = Operand(
                torch.randn(m, k, generator=generator).to(device, a_dtype), torch.full((1,), 0.5, device=device)
            )
            b_rows = torch.randn(n, k, generator=generator).to(device, b_dtype)
            b = Operand(b_rows.t(), torch.full((1,), 3.0, device=device))
            start = torch.randn(m, n, generator=generator).to(device)
            want = start + scaled_mm(a, b, torch.float32)
            got = start.clone()
            cublaslt.matmul_add(a.data, a.scale_inv, b.data, b.scale_inv, got)
            error = ((got - want).norm() / want.norm()).item()
            if not error < 1e-5:
                return (
                    f"cuBLASLt's accumulating fp8 GEMM ({a_dtype} x {b_dtype}) differs from torch's (rel. {error:.2g})"
                )
    except (cublaslt.CublasLtError, OSError, AttributeError, ValueError, RuntimeError) as exc:
        return f"cuBLASLt's accumulating fp8 GEMM is not usable here: {str(exc).splitlines()[0][:200]}"
    return None


def accumulate_reason(device: torch.device) -> str | None:
    """Why :func:`scaled_mm_add` cannot use cuBLASLt's accumulating GEMM on ``device`` (None: it can). Checked once
    per device, never during a CUDA graph capture (the check synchronizes: a capture's call takes the unfused form)."""
    if device.type != "cuda":
        return "not a CUDA device"
    if not ACCUMULATE:
        return "FL_GEMS_FP8_WGRAD_ACCUMULATE=0"
    index = _cuda_index(device)
    if index not in _accumulate_ok and torch.cuda.is_current_stream_capturing():
        return "first used inside a CUDA graph capture (checked at an eager call)"
    return _once_per_device(_accumulate_ok, index, _check_accumulate)


def scaled_mm_add(a: Operand, b: Operand, out: torch.Tensor, *, fast_accum: bool = False) -> bool:
    """``out += dequantize(a) @ dequantize(b)`` for an fp32 ``out``. True where the GEMM added into ``out`` itself
    (cuBLASLt, per-tensor operands on a device that passed :func:`accumulate_reason`); else ``scaled_mm`` then
    ``add_``, the cause said once where it is not simply the CPU, a block-scaled operand or the switch."""
    if a.kind == "tensor" and b.kind == "tensor" and out.is_cuda:
        reason = accumulate_reason(out.device)
        if reason is None:
            try:
                cublaslt.matmul_add(a.data, a.scale_inv, b.data, b.scale_inv, out, fast_accum=fast_accum)
                return True
            except ValueError as exc:  # these operands only (a layout or alignment): this call unfused
                reason = f"operands cuBLASLt's call does not take ({exc})"
            except cublaslt.CublasLtError as exc:
                reason = str(exc)
        if reason not in _accumulate_said and reason != "FL_GEMS_FP8_WGRAD_ACCUMULATE=0":
            _accumulate_said.add(reason)
            LOG.warning(
                "fl_patch flaggems fp8: weight gradients are added into main_grad by a separate kernel: %s (logged once)",
                reason,
            )
    out.add_(scaled_mm(a, b, torch.float32))
    return False
