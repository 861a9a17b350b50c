"""Core attention of megatron-core's local spec on a flash-attention kernel.

Why: the local spec's ``DotProductAttention.forward`` repeats K/V for GQA, writes
the [b, np, sq, sk] scores with ``baddbmm``, and ``FusedScaleMaskSoftmax`` (without
Apex's CUDA extension) upcasts them to fp32, fills a freshly built causal mask,
softmaxes and downcasts, then a ``bmm`` with V and a permute copy. At seq 2048 and 16
heads that is several GB of memory traffic per layer each way and the largest
activation of the model (the fp32 probabilities saved for backward).

How: ``DotProductAttention.forward`` is replaced. When the call is plain softmax
attention (no dropout in training, vanilla softmax, no sliding window, no
attention bias or packed sequences) with no mask, megatron's causal mask type, or
an explicit boolean mask that is exactly the causal mask (checked once per mask
tensor, on the GPU), it runs ``ops.flash_attention`` on q/k/v where they lie
([s, b, heads, d] slices of the fused QKV projection; GQA without repeating K/V)
and returns the [sq, b, np * hn] context upstream returns. Scale: upstream's
``softmax_scale`` times the softmax's ``scale`` (query-key layer scaling), so the
product is the same. Anything else goes to upstream's forward, saying why once.
Backend (``ops.flash_attention``): cuDNN's fused attention through torch SDPA
(``sdpa.py``) where it takes the call (bf16/fp16 on CUDA, head dim a multiple of 8 up
to 128), else this project's Triton flash attention (``FL_GEMS_BACKEND=attention=triton``
forces it). FlagGems 5.0.2's attention is not used: its backward always applies the
causal mask and, at the GPT's training shape, hit an illegal memory access on an H200
(gems.py says more).

Upstream reference: megatron-core 0.19.2
``megatron/core/transformer/dot_product_attention.py`` (``DotProductAttention.forward``),
``megatron/core/fusions/fused_softmax.py`` (``FusedScaleMaskSoftmax.forward_torch_softmax``),
``megatron/core/transformer/utils.py`` (``get_default_causal_mask``, fill value -10000).
When to drop: when the local spec ships a fused attention (upstream's
``DotProductAttention`` calling a flash kernel) or TE's attention is used.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import torch
from megatron.core.transformer.enums import AttnMaskType

import fl_patch

from . import ops
from ._runtime import fallback, kernel_unavailable, note_config

if TYPE_CHECKING:  # megatron has no types: these are Any to mypy, named for the reader
    from megatron.core.transformer.dot_product_attention import DotProductAttention

__all__ = ["TARGET", "dot_product_attention_forward", "is_causal_mask"]

TARGET = "megatron.core.transformer.dot_product_attention.DotProductAttention.forward"
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# id(mask) -> (weakref to it, its _version when checked, shape, the answer)
_mask_checks: dict[int, tuple[weakref.ref, int, tuple[int, ...], bool]] = {}


def is_causal_mask(mask: torch.Tensor, sq: int, sk: int) -> bool:
    """Whether ``mask`` (True = masked out) is megatron's causal mask for [sq, sk], for every batch and head.

    Checked on the device once per mask tensor and remembered while that tensor lives
    and is not modified in place (its ``_version``): a training step passes one mask
    to every layer, so this costs one comparison a step, not one a layer.
    """
    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[-2:] != (sq, sk) or sq != sk:
        return False
    key = id(mask)
    cached = _mask_checks.get(key)
    if cached is not None and cached[0]() is mask and cached[1] == mask._version and cached[2] == tuple(mask.shape):
        return cached[3]
    causal = torch.ones(sq, sk, dtype=torch.bool, device=mask.device).triu_(1)
    answer = bool(torch.equal(mask, causal.expand_as(mask)))
    if len(_mask_checks) > 64:
        _mask_checks.clear()
    _mask_checks[key] = (weakref.ref(mask), mask._version, tuple(mask.shape), answer)
    return answer


def _reason(
    module: DotProductAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    attention_bias: object,
    packed_seq_params: object,
) -> tuple[str | None, bool]:
    """(why upstream must run or None, causal)."""
    if packed_seq_params is not None or attention_bias is not None:
        return "packed sequences or attention bias (upstream's DotProductAttention rejects them)", False
    softmax = module.scale_mask_softmax
    if softmax.window_size is not None:
        return "sliding-window attention", False
    if module.softmax_offset is not None:
        return f"softmax_type {module.config.softmax_type!r}", False
    if module.training and module.attention_dropout.p > 0:
        return "attention dropout > 0 in training", False
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return "q/k/v not [s, b, heads, d]", False
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in _DTYPES:
        return f"dtypes q {query.dtype}, k {key.dtype}, v {value.dtype}", False
    sq, sk = query.shape[0], key.shape[0]
    if query.shape[2] % key.shape[2] or key.shape != value.shape:
        return "query heads not a multiple of key/value heads", False
    if attention_mask is None:
        causal = softmax.attn_mask_type == AttnMaskType.causal and sq > 1
    elif is_causal_mask(attention_mask, sq, sk):
        causal = True
    else:
        return "an explicit attention mask other than the causal one", False
    reason = ops.attention_reason(sq, sk, causal, query.shape[-1])
    if reason is None:
        reason = kernel_unavailable(query, key, value)
    return reason, causal


def dot_product_attention_forward(
    self: DotProductAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    attn_mask_type: object = None,
    attention_bias: torch.Tensor | None = None,
    packed_seq_params: object = None,
) -> torch.Tensor:
    """``DotProductAttention.forward`` as flash attention where it applies."""
    note_config(self.config)  # a model without the pack's norms still reaches deterministic mode
    reason, causal = _reason(self, query, key, value, attention_mask, attention_bias, packed_seq_params)
    if reason is not None:
        fallback("attention", reason)
        return fl_patch.original(TARGET)(
            self, query, key, value, attention_mask, attn_mask_type, attention_bias, packed_seq_params
        )
    scale = self.softmax_scale * (self.scale_mask_softmax.scale or 1.0)
    context = ops.flash_attention(query, key, value, causal, scale)
    return context.reshape(context.shape[0], context.shape[1], -1)
