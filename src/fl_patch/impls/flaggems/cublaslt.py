"""cuBLASLt's fp8 GEMM that adds into its fp32 output (``beta = 1``), called through ctypes.

Why: under ``gradient_accumulation_fusion`` each linear's weight gradient is added into megatron's fp32
``main_grad``. ``torch._scaled_mm`` cannot accumulate: it writes an fp32 ``dw`` that a separate ``add_`` reads back
with ``main_grad`` and writes again, 16 bytes per weight element per micro-batch (17 ms per 4 micro-batches of the
1.31B on an H100, docs/gpu_pack.md). cuBLASLt, the library ``torch._scaled_mm`` itself calls, adds in the GEMM's
epilogue when ``beta = 1`` (Transformer Engine's wgrad does so): 8 bytes, and no extra kernel.

How: cuBLASLt's C API on the ``libcublasLt`` that torch's CUDA build has already loaded into this process (found in
``/proc/self/maps``, else by its soname): no build step, no new dependency. One handle per device and one 32 MiB
workspace per stream (as torch keeps its cuBLAS workspaces: two streams running GEMMs at once, e.g. megatron's MoE
shared-expert overlap, must not share scratch memory); a descriptor, layouts and the heuristic's algorithm per GEMM
shape, kept; the two scale pointers set at each call; the GEMM enqueued on torch's current stream (so it is captured
by a CUDA graph like any torch kernel).

The layouts: ``a`` row-major ``[m, k]`` and ``b`` column-major ``[k, n]`` as ``torch._scaled_mm`` takes them, ``out``
row-major ``[m, n]``. cuBLASLt is column-major, so it computes ``out^T = b^T a^T``: its A is ``b``'s storage read
transposed (``TRANSA = T``), its B is ``a``'s storage (``TRANSB = N``), the "TN" layout its fp8 GEMMs require.

Nothing here decides whether to trust it: ``fp8_quant.scaled_mm_add`` checks it once per device against
``torch._scaled_mm`` plus ``add_`` and falls back, said once, on any error or disagreement. Enum values are those of
cuBLASLt's ``cublasLt.h`` (CUDA 12 and 13 agree on every one used here).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import torch

__all__ = ["CublasLtError", "matmul_add"]

# cublasStatus_t / cudaDataType_t / cublasComputeType_t / cublasOperation_t
_SUCCESS = 0
_R_32F = 0
_R_8F_E4M3 = 28
_R_8F_E5M2 = 29
_COMPUTE_32F = 68
_OP_N, _OP_T = 0, 1
# cublasLtMatmulDescAttributes_t / cublasLtMatmulPreferenceAttributes_t
_DESC_TRANSA = 3
_DESC_TRANSB = 4
_DESC_A_SCALE_POINTER = 17
_DESC_B_SCALE_POINTER = 18
_DESC_FAST_ACCUM = 25
_PREF_MAX_WORKSPACE_BYTES = 1

_WORKSPACE_BYTES = 32 * 1024 * 1024  # what NVIDIA's guide asks for Hopper's fp8 kernels
_CUDA_TYPE = {torch.float8_e4m3fn: _R_8F_E4M3, torch.float8_e5m2: _R_8F_E5M2, torch.float32: _R_32F}


class CublasLtError(RuntimeError):
    """A cuBLASLt call returned an error status, or the library is not in this process."""


class _Algo(ctypes.Structure):  # cublasLtMatmulAlgo_t: 8 opaque 64-bit words
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class _Heuristic(ctypes.Structure):  # cublasLtMatmulHeuristicResult_t
    _fields_ = [
        ("algo", _Algo),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves_count", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


_vp = ctypes.c_void_p
_PROTOTYPES: dict[str, list[type]] = {
    "cublasLtCreate": [ctypes.POINTER(_vp)],
    "cublasLtMatmulDescCreate": [ctypes.POINTER(_vp), ctypes.c_int, ctypes.c_int],
    "cublasLtMatmulDescSetAttribute": [_vp, ctypes.c_int, _vp, ctypes.c_size_t],
    "cublasLtMatrixLayoutCreate": [ctypes.POINTER(_vp), ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64],
    "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(_vp)],
    "cublasLtMatmulPreferenceSetAttribute": [_vp, ctypes.c_int, _vp, ctypes.c_size_t],
    # (handle, desc, A, B, C, D layouts, preference, requested, results, returned)
    "cublasLtMatmulAlgoGetHeuristic": [
        *[_vp] * 7,
        ctypes.c_int,
        ctypes.POINTER(_Heuristic),
        ctypes.POINTER(ctypes.c_int),
    ],
    # (handle, desc, alpha, A, A layout, B, B layout, beta, C, C layout, D, D layout, algo, workspace, size, stream)
    "cublasLtMatmul": [*[_vp] * 12, ctypes.POINTER(_Algo), _vp, ctypes.c_size_t, _vp],
}


def _library_path() -> str | None:
    """The libcublasLt torch's CUDA build mapped into this process (its cuBLAS handle is made by then)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if "/libcublasLt.so" in path:
                    return path
    except OSError:
        pass
    return None


_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                names = [p for p in (_library_path(),) if p] + ["libcublasLt.so.13", "libcublasLt.so.12"]
                errors = []
                for name in names:
                    try:
                        lib = ctypes.CDLL(name)
                        break
                    except OSError as exc:
                        errors.append(f"{name}: {exc}")
                else:
                    raise CublasLtError("libcublasLt not found in this process: " + "; ".join(errors))
                for fn, argtypes in _PROTOTYPES.items():
                    func = getattr(lib, fn)
                    func.argtypes = argtypes
                    func.restype = ctypes.c_int
                _lib = lib
    return _lib


def _call(name: str, *args: object) -> None:
    status = getattr(_library(), name)(*args)
    if status != _SUCCESS:
        raise CublasLtError(f"{name} returned cublasStatus_t {status}")


def _set(setter: str, obj: ctypes.c_void_p, attr: int, value: ctypes._SimpleCData) -> None:
    _call(setter, obj, attr, ctypes.byref(value), ctypes.sizeof(value))


@dataclass
class _Device:
    handle: ctypes.c_void_p
    preference: ctypes.c_void_p
    workspaces: dict[int, torch.Tensor]  # by stream handle; kept for the process's life (a CUDA graph replays them)


@dataclass
class _Plan:
    desc: ctypes.c_void_p
    layout_a: ctypes.c_void_p
    layout_b: ctypes.c_void_p
    layout_out: ctypes.c_void_p
    algo: _Algo


_devices: dict[int, _Device] = {}
_plans: dict[tuple, _Plan] = {}
_lock = threading.Lock()


def _device(index: int) -> _Device:
    state = _devices.get(index)
    if state is None:
        handle, preference = _vp(), _vp()
        _call("cublasLtCreate", ctypes.byref(handle))
        _call("cublasLtMatmulPreferenceCreate", ctypes.byref(preference))
        _set(
            "cublasLtMatmulPreferenceSetAttribute",
            preference,
            _PREF_MAX_WORKSPACE_BYTES,
            ctypes.c_uint64(_WORKSPACE_BYTES),
        )
        state = _devices[index] = _Device(handle, preference, {})
    return state


def _workspace(state: _Device, index: int, stream: int) -> torch.Tensor:
    workspace = state.workspaces.get(stream)
    if workspace is None:  # made on the stream that uses it (inside a capture: from the graph's pool, kept alive here)
        workspace = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=torch.device("cuda", index))
        state.workspaces[stream] = workspace
    return workspace


def _layout(dtype: torch.dtype, rows: int, cols: int, ld: int) -> ctypes.c_void_p:
    layout = _vp()
    _call("cublasLtMatrixLayoutCreate", ctypes.byref(layout), _CUDA_TYPE[dtype], rows, cols, ld)
    return layout


def _plan(state: _Device, key: tuple) -> _Plan:
    plan = _plans.get(key)
    if plan is None:
        _, a_dtype, b_dtype, m, n, k, lda, ldb, ldo, fast_accum = key
        desc = _vp()
        _call("cublasLtMatmulDescCreate", ctypes.byref(desc), _COMPUTE_32F, _R_32F)
        _set("cublasLtMatmulDescSetAttribute", desc, _DESC_TRANSA, ctypes.c_int32(_OP_T))
        _set("cublasLtMatmulDescSetAttribute", desc, _DESC_TRANSB, ctypes.c_int32(_OP_N))
        _set("cublasLtMatmulDescSetAttribute", desc, _DESC_FAST_ACCUM, ctypes.c_int8(1 if fast_accum else 0))
        # cuBLASLt's A: b's storage, column-major [k, n]; its B: a's storage, column-major [k, m]; out^T: [n, m]
        layout_a = _layout(b_dtype, k, n, ldb)
        layout_b = _layout(a_dtype, k, m, lda)
        layout_out = _layout(torch.float32, n, m, ldo)
        result, found = _Heuristic(), ctypes.c_int(0)
        args = (state.handle, desc, layout_a, layout_b, layout_out, layout_out, state.preference)
        _call("cublasLtMatmulAlgoGetHeuristic", *args, 1, ctypes.byref(result), ctypes.byref(found))
        if found.value < 1:
            raise CublasLtError(f"cuBLASLt has no fp8 GEMM for m={m} n={n} k={k} ({a_dtype} x {b_dtype} -> fp32)")
        plan = _plans[key] = _Plan(desc, layout_a, layout_b, layout_out, result.algo)
    return plan


_ONE = ctypes.c_float(1.0)


def matmul_add(
    a: torch.Tensor,
    a_scale_inv: torch.Tensor,
    b: torch.Tensor,
    b_scale_inv: torch.Tensor,
    out: torch.Tensor,
    *,
    fast_accum: bool = False,
) -> None:
    """``out += (a * a_scale_inv) @ (b * b_scale_inv)`` in one cuBLASLt GEMM on the current stream.

    ``a``: fp8 ``[m, k]`` row-major; ``b``: fp8 ``[k, n]`` column-major (``b.t()`` contiguous); ``out``: fp32
    ``[m, n]`` row-major on the same device; each scale one fp32 value. Raises :class:`CublasLtError` (or
    ``ValueError`` for operands outside that contract) and leaves ``out`` unchanged when it raises before the GEMM."""
    m, k = a.shape
    k2, n = b.shape
    if k2 != k or tuple(out.shape) != (m, n):
        raise ValueError(f"shapes {tuple(a.shape)} @ {tuple(b.shape)} -> {tuple(out.shape)}")
    if a.stride(1) != 1 or b.stride(0) != 1 or out.stride(1) != 1 or out.dtype != torch.float32:
        raise ValueError("a must be row-major, b column-major, out row-major fp32")
    if a.dtype not in _CUDA_TYPE or b.dtype not in _CUDA_TYPE or a.dtype == b.dtype == torch.float8_e5m2:
        raise ValueError(f"operand types {a.dtype} x {b.dtype}")
    if a_scale_inv.data_ptr() % 16 or b_scale_inv.data_ptr() % 16:
        raise ValueError("cuBLASLt takes scale pointers 16-byte aligned only")
    index = out.device.index if out.device.index is not None else torch.cuda.current_device()
    key = (index, a.dtype, b.dtype, m, n, k, a.stride(0), b.stride(1), out.stride(0), fast_accum)
    with _lock:  # one autograd thread per device in practice; the lock keeps the plan's scale pointers to this call
        state = _device(index)
        plan = _plan(state, key)
        _set("cublasLtMatmulDescSetAttribute", plan.desc, _DESC_A_SCALE_POINTER, _vp(b_scale_inv.data_ptr()))
        _set("cublasLtMatmulDescSetAttribute", plan.desc, _DESC_B_SCALE_POINTER, _vp(a_scale_inv.data_ptr()))
        stream = torch.cuda.current_stream(out.device).cuda_stream
        workspace = _workspace(state, index, stream)
        _call(
            "cublasLtMatmul",
            state.handle, plan.desc, ctypes.byref(_ONE),
            _vp(b.data_ptr()), plan.layout_a, _vp(a.data_ptr()), plan.layout_b,
            ctypes.byref(_ONE), _vp(out.data_ptr()), plan.layout_out, _vp(out.data_ptr()), plan.layout_out,
            ctypes.byref(plan.algo), _vp(workspace.data_ptr()), _WORKSPACE_BYTES, _vp(stream),
        )  # fmt: skip
