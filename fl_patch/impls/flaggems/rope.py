"""Rotary position embedding of megatron-core on the pack's kernel.

Why: with ``apply_rope_fusion=False`` (TE's fused RoPE absent) upstream's
``_apply_rotary_pos_emb_bshd`` runs about eight kernels per call (cos, sin, casts,
rotate-half's negate and cat, two products, a sum, a final cat), twice a layer.
FlagGems 5.0.2's rotary kernel is forward-only (inference), so it cannot serve
training: the kernel here is this project's.

How: ``rope_utils.apply_rotary_pos_emb`` is replaced (and the names other modules
bound to it, ``transformer.attention``'s among them). For the bshd layout it calls
the pack's kernel: t [s, b, h, d] read through its strides, frequencies [s or 1, 1,
1, rot] in fp32, ``rotary_interleaved`` and ``mscale`` honoured. Upstream rounds
cos and sin to the input dtype before multiplying; the kernel keeps them in fp32
(a difference of bf16 rounding). Falls back, saying why once, for: TE's fused path
(``apply_rope_fusion``), packed sequences (``cu_seqlens``), MLA-style interleaving,
frequencies per batch or head, frequencies that require grad, other dtypes, input
not on CUDA. Tensor/context parallelism need nothing here (bshd, per-rank heads).

Upstream reference: megatron-core 0.19.2
``megatron/core/models/common/embeddings/rope_utils.py`` (``apply_rotary_pos_emb``,
``_apply_rotary_pos_emb_bshd``).
When to drop: when upstream's unfused RoPE is one kernel, or TE's fused RoPE is used.
"""

from __future__ import annotations

import torch

import fl_patch

from . import ops
from ._runtime import fallback, kernel_unavailable

__all__ = ["TARGET", "apply_rotary_pos_emb"]

TARGET = "megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb"
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _reason(t: torch.Tensor, freqs: torch.Tensor, config: object, cu_seqlens: object, mla: bool) -> str | None:
    if config.apply_rope_fusion:
        return "apply_rope_fusion=True (TE's fused RoPE)"
    if cu_seqlens is not None:
        return "packed sequences (cu_seqlens, thd layout)"
    if mla:
        return "MLA-style rotary interleaving"
    if t.dim() != 4 or freqs.dim() != 4:
        return f"shapes t {tuple(t.shape)}, freqs {tuple(freqs.shape)} (need [s, b, h, d] and [s, 1, 1, rot])"
    rot = freqs.shape[-1]
    if freqs.shape[1] != 1 or freqs.shape[2] != 1 or freqs.shape[0] not in (1, t.shape[0]):
        return f"freqs of shape {tuple(freqs.shape)} for t of shape {tuple(t.shape)}"
    if rot % 2 or rot > t.shape[-1] or rot == 0:
        return f"rotary width {rot} for head dim {t.shape[-1]}"
    if freqs.requires_grad:
        return "freqs require grad"
    if t.dtype not in _DTYPES:
        return f"dtype {t.dtype}"
    return kernel_unavailable(t, freqs)


def apply_rotary_pos_emb(
    t: torch.Tensor,
    freqs: torch.Tensor,
    config: object,
    cu_seqlens: torch.Tensor | None = None,
    mscale: float = 1.0,
    cp_group: object = None,
    mla_rotary_interleaved: bool | None = False,
) -> torch.Tensor:
    """``apply_rotary_pos_emb`` with the bshd case on the pack's kernel."""
    mla = config.multi_latent_attention if mla_rotary_interleaved is None else mla_rotary_interleaved
    reason = _reason(t, freqs, config, cu_seqlens, bool(mla))
    if reason is not None:
        fallback("rope", reason)
        return fl_patch.original(TARGET)(t, freqs, config, cu_seqlens, mscale, cp_group, mla_rotary_interleaved)
    return ops.rotary(t, freqs, float(mscale), bool(config.rotary_interleaved))
