"""Megatron's scale-mask-softmax on the pack's kernel, for attention that cannot take the flash path.

Why: when core attention falls back to upstream (an explicit non-causal mask, say),
``FusedScaleMaskSoftmax`` without Apex's CUDA extension runs
``forward_torch_softmax``: ``.float()``, scale, ``masked_fill_`` with -10000 (a
causal mask built anew on every call), ``softmax``, ``.bfloat16()``, five passes over
[b, np, sq, sk] forward and autograd's more backward. FlagGems 5.0.2 has a plain
softmax and a scaled softmax, but neither takes a mask.

How: ``FusedScaleMaskSoftmax.forward`` is replaced. Where upstream would use Apex's
fused kernel it still does; otherwise one kernel reads each score row once and
writes probabilities in upstream's output dtype (the input dtype, or bf16/fp16 when
``softmax_in_fp32`` upcasts half input), with the causal mask computed from indices
or a boolean mask read through broadcast strides, filled with -10000 after scaling
as upstream does; backward zeroes masked positions as ``masked_fill_`` does.
Falls back, saying why once, for: ``softmax_offset`` (off-by-one/learnable
softmax), sliding windows, rows wider than 32768, non-boolean masks, inputs not on
CUDA. When ``masked_softmax_fusion=True`` but Apex's extension is missing, upstream
raises ``ImportError`` from ``is_kernel_available``; this impl serves the call.

Upstream reference: megatron-core 0.19.2 ``megatron/core/fusions/fused_softmax.py``
(``FusedScaleMaskSoftmax.forward``, ``forward_torch_softmax``).
When to drop: when the flash path covers every mask megatron passes, or upstream's
torch fallback is a single fused kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from megatron.core.transformer.enums import AttnMaskType

import fl_patch

from ._runtime import fallback, kernel_unavailable

if TYPE_CHECKING:  # megatron has no types: these are Any to mypy, named for the reader
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax

__all__ = ["TARGET", "scale_mask_softmax_forward"]

TARGET = "megatron.core.fusions.fused_softmax.FusedScaleMaskSoftmax.forward"
MAX_KEYS = 32768  # kernels/softmax.py MAX_KEYS
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _apex_kernel(module: FusedScaleMaskSoftmax, mask: torch.Tensor | None, size: torch.Size) -> bool:
    try:
        return bool(module.is_kernel_available(mask, *size))
    except ImportError:
        return False  # masked_softmax_fusion asked for, Apex's extension absent


def _reason(module: FusedScaleMaskSoftmax, x: torch.Tensor, mask: torch.Tensor | None, offset: object) -> str | None:
    if offset is not None:
        return "softmax_offset (off-by-one or learnable softmax)"
    if module.window_size is not None:
        return "sliding-window mask"
    if x.dim() != 4:
        return f"scores of shape {tuple(x.shape)}"
    if x.dtype not in _DTYPES:
        return f"dtype {x.dtype}"
    if x.shape[-1] > MAX_KEYS:
        return f"{x.shape[-1]} keys > {MAX_KEYS}"
    if mask is not None:
        if mask.dtype != torch.bool:
            return f"mask dtype {mask.dtype}"
        try:
            torch.broadcast_shapes(mask.shape, x.shape)
        except RuntimeError:
            return f"mask of shape {tuple(mask.shape)} for scores {tuple(x.shape)}"
        if mask.dim() != 4:
            return f"mask of {mask.dim()} dimensions"
    elif module.attn_mask_type == AttnMaskType.causal and x.shape[2] > 1 and x.shape[2] != x.shape[3]:
        return "causal mask with sq != sk"
    return kernel_unavailable(x, mask)


def scale_mask_softmax_forward(
    self: FusedScaleMaskSoftmax,
    input: torch.Tensor,
    mask: torch.Tensor | None,
    softmax_offset: torch.Tensor | None = None,
) -> torch.Tensor:
    """``FusedScaleMaskSoftmax.forward`` with the torch fallback path on the pack's kernel."""
    if softmax_offset is None and _apex_kernel(self, mask, input.size()):
        return fl_patch.original(TARGET)(self, input, mask, softmax_offset)
    reason = _reason(self, input, mask, softmax_offset)
    if reason is not None:
        fallback("softmax", reason)
        return fl_patch.original(TARGET)(self, input, mask, softmax_offset)
    from .kernels.softmax import scaled_masked_softmax

    causal = mask is None and self.attn_mask_type == AttnMaskType.causal and input.shape[2] > 1
    if self.input_in_float16 and self.softmax_in_fp32:
        out_dtype = torch.float16 if self.input_in_fp16 else torch.bfloat16
    else:
        out_dtype = input.dtype
    scale = float(self.scale) if self.scale is not None else 1.0
    return scaled_masked_softmax(input, mask, causal, scale, out_dtype)
