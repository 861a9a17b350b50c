"""Core attention on cuDNN's fused flash attention, through torch's ``scaled_dot_product_attention``.

Why: on an H200, causal GQA attention forward+backward at [s 4096, b 2, 16 heads, 8 kv
heads, d 128], on the q, k, v megatron hands core attention, runs at 448 TFLOP/s here,
against 329 for the pack's Triton kernel and 243 for SDPA's flash backend
(docs/gpu_pack.md, "Attention", has the command). cuDNN's kernels use Hopper's
asynchronous copy engine and warp-specialized matrix instructions, which the Triton
kernel does not; their speed was the same for every memory layout of q, k, v tried.

How: q [sq, b, hq, d], k and v [sk, b, hkv, d] (megatron's layout, strided slices of
the fused QKV projection) are handed to SDPA as [b, heads, s, d] *views* (no copy;
cuDNN reads strides), with SDPA restricted to the cuDNN backend. GQA: SDPA's
``enable_gqa`` where the installed torch lets cuDNN take it, else K/V repeated per
query head (autograd sums their gradients back); which one is learned at the first GQA
call. The output comes back in q's memory order, so [sq, b, hq, d] is a view.
``unsupported(...)`` says which calls cuDNN cannot take (CPU tensors, fp32, head dims
that are not multiples of 8 or above 128, torch without cuDNN); those run the pack's
Triton kernel (``ops.flash_attention``), said once. A call SDPA itself rejects ("No
available kernel") is remembered by its (dtype, head dim, causal, GQA) class and goes
to the Triton kernel too.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

__all__ = ["CALLS", "Unsupported", "cudnn_attention", "gqa_mode", "unsupported"]

_HALF = (torch.bfloat16, torch.float16)
_rejected: dict[tuple, str] = {}
_gqa_native: bool | None = None
CALLS = {"cudnn": 0}  # calls cuDNN took (tests check that the backend they ask for ran)


class Unsupported(RuntimeError):
    """SDPA's cuDNN backend did not take this call."""


def unsupported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> str | None:
    """None if cuDNN's attention can take this call, else why not."""
    if q.device.type != "cuda":
        return f"input on {q.device.type}"
    if q.dtype not in _HALF:
        return f"dtype {q.dtype} (cuDNN attention takes bf16/fp16)"
    d = q.shape[-1]
    if d % 8 or d > 128:
        return f"head dim {d} (cuDNN: a multiple of 8, at most 128)"
    if not torch.backends.cudnn.is_available():
        return "torch has no cuDNN"
    return _rejected.get(_class_of(q, k, causal))


def _class_of(q: torch.Tensor, k: torch.Tensor, causal: bool) -> tuple:
    return (q.dtype, q.shape[-1], causal, q.shape[2] != k.shape[2])


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, gqa: bool) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SDPA warns before it raises "No available kernel"
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)


def cudnn_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """Attention of q [sq, b, hq, d] over k, v [sk, b, hkv, d] on cuDNN; [sq, b, hq, d] out. Raises Unsupported."""
    global _gqa_native
    qt, kt, vt = (t.permute(1, 2, 0, 3) for t in (q, k, v))
    group = q.shape[2] // k.shape[2]
    try:
        if group > 1 and _gqa_native is not False:
            try:
                out = _sdpa(qt, kt, vt, causal, scale, True)
                _gqa_native = True
                CALLS["cudnn"] += 1
                return out.permute(2, 0, 1, 3)
            except RuntimeError as exc:
                if "No available kernel" not in str(exc) or _gqa_native:
                    raise
                _gqa_native = False
        if group > 1:
            kt, vt = kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1)
        out = _sdpa(qt, kt, vt, causal, scale, False)
        CALLS["cudnn"] += 1
        return out.permute(2, 0, 1, 3)
    except RuntimeError as exc:
        if "No available kernel" not in str(exc):
            raise
        reason = "SDPA's cuDNN backend declined it"
        _rejected[_class_of(q, k, causal)] = reason
        raise Unsupported(reason) from exc


def gqa_mode() -> str:
    """How GQA reached cuDNN so far: "native" (enable_gqa), "repeated" (K/V repeated) or "unknown"."""
    return {True: "native", False: "repeated", None: "unknown"}[_gqa_native]
