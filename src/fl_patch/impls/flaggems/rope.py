"""Rotary position embedding of megatron-core on the pack's kernel.

Why: with ``apply_rope_fusion=False`` (TE's fused RoPE absent) upstream's
``_apply_rotary_pos_emb_bshd`` runs about eight kernels per call (cos, sin, casts,
rotate-half's negate and cat, two products, a sum, a final cat), twice a layer.
FlagGems 5.0.2's rotary kernel is forward-only (inference), so it cannot serve
training: the kernel here is this project's.

How: ``rope_utils.apply_rotary_pos_emb`` is replaced (and the names other modules
bound to it, ``transformer.attention``'s among them). For the bshd layout it calls
the pack's kernel: t [s, b, h, d] read through its strides, frequencies [s or 1, 1,
1, rot] in fp32, ``rotary_interleaved`` and ``mscale`` honoured; MLA's interleaving
(``mla_rotary_interleaved``: even channels, then odd ones) is the same copy upstream
makes, before the kernel. Upstream rounds cos and sin to the input dtype before
multiplying; the kernel keeps them in fp32 (a difference of bf16 rounding). Falls back,
saying why once, for: TE's fused path (``apply_rope_fusion``), packed sequences
(``cu_seqlens``), frequencies per batch or head, frequencies that require grad, other dtypes, input
not on CUDA. Tensor/context parallelism need nothing here (bshd, per-rank heads).

Upstream reference: megatron-core 0.19.2
``megatron/core/models/common/embeddings/rope_utils.py`` (``apply_rotary_pos_emb``,
``_apply_rotary_pos_emb_bshd``).
When to drop: when upstream's unfused RoPE is one kernel, or TE's fused RoPE is used.

Fused QKV RoPE (``apply_fused_qkv_rotary_pos_emb``, ``HAVE_FUSED_QKV_ROPE``):

Why: with ``TransformerConfig.fused_single_qkv_rope=True`` megatron's attention
keeps the QKV projection unsplit and hands it to TE's
``apply_fused_qkv_rotary_pos_emb`` (query and key rotated, value split off, in one
kernel each way); without TE it refuses the option ("fused_single_qkv_rope
requested but not available"). The split path it falls back to pays a copy of the
query (its reshape of a strided slice), one RoPE launch for the query and one for
the key, and a concatenation of the three gradients in backward.
How: ``attention.apply_fused_qkv_rotary_pos_emb`` is provided (created where TE is
absent) with TE's signature, and ``attention.HAVE_FUSED_QKV_ROPE`` is set so
megatron takes the path when the config asks for it (nothing changes otherwise).
Forward and backward are one Triton launch each. As with TE, the frequencies are
used as given (megatron passes no mscale and no interleaving on this path).
Falls back to the split computation (upstream's ``_apply_rotary_pos_emb_bshd``),
saying why once, for other dtypes, input not on CUDA, or triton missing; raises for
what neither supports here (``bshd``/``thd`` layouts, ``start_positions``,
context parallelism).
Upstream reference: megatron-core 0.19.2 ``megatron/core/transformer/attention.py``
(``Attention.forward``, the ``split_qkv`` decision and ``HAVE_FUSED_QKV_ROPE``).
When to drop: when TE (with its fused QKV RoPE) is installed and preferred.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

import fl_patch

from . import ops
from ._runtime import fallback, kernel_unavailable

if TYPE_CHECKING:  # megatron has no types: these are Any to mypy, named for the reader
    from megatron.core.transformer.transformer_config import TransformerConfig

__all__ = [
    "FUSED_QKV_TARGET",
    "HAVE_FUSED_QKV_ROPE",
    "TARGET",
    "apply_fused_qkv_rotary_pos_emb",
    "apply_rotary_pos_emb",
    "fused_apply_rotary_pos_emb",
]

TARGET = "megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb"
FUSED_QKV_TARGET = "megatron.core.transformer.attention.apply_fused_qkv_rotary_pos_emb"
# What megatron's attention reads to know the fused QKV RoPE function exists.
HAVE_FUSED_QKV_ROPE = True
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _reason(t: torch.Tensor, freqs: torch.Tensor, config: TransformerConfig, cu_seqlens: object) -> str | None:
    if config.apply_rope_fusion:
        return "apply_rope_fusion=True (upstream's fused branch: the pack's fused_apply_rotary_pos_emb)"
    if cu_seqlens is not None:
        return "packed sequences (cu_seqlens, thd layout)"
    if t.dim() != 4 or freqs.dim() != 4:
        return f"shapes t {tuple(t.shape)}, freqs {tuple(freqs.shape)} (need [s, b, h, d] and [s, 1, 1, rot])"
    if freqs.shape[1] != 1 or freqs.shape[2] != 1 or freqs.shape[0] not in (1, t.shape[0]):
        return f"freqs of shape {tuple(freqs.shape)} for t of shape {tuple(t.shape)}"
    return _kernel_reason(t, freqs)


def _kernel_reason(t: torch.Tensor, freqs: torch.Tensor) -> str | None:
    """Why the rotary kernel cannot take t [s, b, h, d] with these frequencies (their layout checked by the caller)."""
    rot = freqs.shape[-1]
    if rot % 2 or rot > t.shape[-1] or rot == 0:
        return f"rotary width {rot} for head dim {t.shape[-1]}"
    if freqs.requires_grad:
        return "freqs require grad"
    if t.dtype not in _DTYPES:
        return f"dtype {t.dtype}"
    return kernel_unavailable(t, freqs)


def apply_rotary_pos_emb(
    t: torch.Tensor, freqs: torch.Tensor, config: TransformerConfig, *args: Any, **kwargs: Any
) -> torch.Tensor:
    """``apply_rotary_pos_emb`` with the bshd case on the pack's kernel.

    ``cu_seqlens, mscale, cp_group, mla_rotary_interleaved`` (the last is 0.19's only) arrive
    in ``args``/``kwargs``: the fallback passes upstream only what its caller passed.
    """
    known = ("cu_seqlens", "mscale", "cp_group", "mla_rotary_interleaved")
    named = dict(zip(known, args, strict=False))
    named.update(kwargs)
    cu_seqlens = named.get("cu_seqlens")
    mscale = named.get("mscale", 1.0)
    mla_rotary_interleaved = named.get("mla_rotary_interleaved", False)
    mla = config.multi_latent_attention if mla_rotary_interleaved is None else mla_rotary_interleaved
    # A parameter of a later release (main's `inverse`) that the kernel does not implement, set: upstream.
    later = {k: v for k, v in named.items() if k not in known and v not in (None, False)}
    if len(args) > len(known):
        later["positional"] = args[len(known) :]
    reason = f"{', '.join(later)} not in the kernel" if later else _reason(t, freqs, config, cu_seqlens)
    if reason is not None:
        fallback("rope", reason)
        return fl_patch.original(TARGET)(t, freqs, config, *args, **kwargs)
    if mla:
        # MLA's interleaving, as upstream's _apply_rotary_pos_emb_bshd does it: the rotated part's even
        # channels, then its odd ones (one copy, as upstream's), then rotate-half RoPE on the result
        rot = freqs.shape[-1]
        t = torch.cat((t[..., 0:rot:2], t[..., 1:rot:2], t[..., rot:]), dim=-1)
    return ops.rotary(t, freqs, float(mscale), bool(config.rotary_interleaved))


def fused_apply_rotary_pos_emb(
    t: torch.Tensor, freqs: torch.Tensor, transpose_output_memory: bool = False, interleaved: bool = False
) -> torch.Tensor:
    """TE's fused RoPE (``rope_utils.fused_apply_rotary_pos_emb``, None without TE) on the pack's kernel.

    Why: ``apply_rope_fusion=True`` (Megatron-LM's default: ``pretrain_gpt.py`` without ``--no-rope-fusion``)
    makes ``TransformerConfig`` refuse the config where this name is None ("apply_rope_fusion is not available.
    Please install TE >= 1.4").
    How: TE's signature and semantics (t [s, b, h, d], freqs [>= s, 1, 1, rot], no mscale, ``interleaved``;
    ``transpose_output_memory`` is a memory layout only, ignored as megatron's TE wrapper does): the pack's
    rotary kernel; where the kernel cannot run, the CPU pack's plain-torch version of the same function, said once.
    Upstream reference: megatron-core 0.19.2 ``rope_utils.py`` (``apply_rotary_pos_emb``'s fused branch),
    ``extensions/transformer_engine.py`` (``fused_apply_rotary_pos_emb``).
    When to drop: when TE is installed (nothing here is registered then).
    """
    del transpose_output_memory
    reason: str | None
    if t.dim() != 4 or freqs.dim() != 4 or freqs.shape[1] != 1 or freqs.shape[2] != 1 or freqs.shape[0] < t.shape[0]:
        reason = f"shapes t {tuple(t.shape)}, freqs {tuple(freqs.shape)} (need [s, b, h, d] and [>= s, 1, 1, rot])"
    else:
        reason = _kernel_reason(t, freqs)
    if reason is not None:
        from fl_patch.impls.cpu import rope as torch_rope

        fallback("rope", f"fused RoPE: {reason}")
        return torch_rope.fused_apply_rotary_pos_emb(t, freqs, interleaved=interleaved)
    return ops.rotary(t, freqs[: t.shape[0]], 1.0, bool(interleaved))


def apply_fused_qkv_rotary_pos_emb(
    qkv: torch.Tensor,
    q_freqs: torch.Tensor,
    k_freqs: torch.Tensor,
    qkv_split_arg_list: list[int],
    tensor_format: str = "sbhd",
    start_positions: torch.Tensor | None = None,
    interleaved: bool = False,
    cp_size: int = 1,
    cp_rank: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TE's ``apply_fused_qkv_rotary_pos_emb`` for the sbhd training path megatron uses.

    ``qkv`` [s, b, ng, (g + 2) * hn] split by ``qkv_split_arg_list`` = [g * hn, hn, hn];
    returns query [s, b, ng * g, hn] and key [s, b, ng, hn] rotated, value [s, b, ng, hn].
    """
    unsupported = _fused_unsupported(qkv, q_freqs, k_freqs, qkv_split_arg_list, tensor_format, start_positions, cp_size)
    if unsupported is not None:
        raise NotImplementedError(f"fl_patch FlagGems pack, {FUSED_QKV_TARGET}: {unsupported}")
    hn = int(qkv_split_arg_list[1])
    g = int(qkv_split_arg_list[0]) // hn
    reason = _fused_reason(qkv, q_freqs, k_freqs)
    if reason is not None:
        fallback("qkv_rope", reason)
        return _split_then_rotate(qkv, q_freqs, k_freqs, g, hn, interleaved)
    return ops.fused_qkv_rotary(qkv, q_freqs, k_freqs, g, hn, bool(interleaved))


def _fused_unsupported(
    qkv: torch.Tensor,
    q_freqs: torch.Tensor,
    k_freqs: torch.Tensor,
    split: list[int],
    tensor_format: str,
    start_positions: torch.Tensor | None,
    cp_size: int,
) -> str | None:
    """Why this call can be served neither by the kernel nor by the split fallback, or None."""
    if tensor_format != "sbhd":
        return f"tensor_format={tensor_format!r} (only 'sbhd', what megatron passes)"
    if start_positions is not None:
        return "start_positions (inference offsets)"
    if cp_size != 1:
        return f"cp_size={cp_size} (context parallelism)"
    if qkv.dim() != 4 or len(split) != 3 or split[1] != split[2] or split[1] <= 0 or split[0] % split[1]:
        return (
            f"qkv of shape {tuple(qkv.shape)} split as {list(split)} (need [s, b, ng, (g + 2) * hn], [g * hn, hn, hn])"
        )
    if qkv.shape[-1] != sum(split):
        return f"qkv's last dimension {qkv.shape[-1]} != sum of the split {list(split)}"
    for name, freqs in (("q_freqs", q_freqs), ("k_freqs", k_freqs)):
        rot = freqs.shape[-1]
        if freqs.dim() != 4 or freqs.shape[1] != 1 or freqs.shape[2] != 1 or rot % 2 or rot > split[1]:
            return f"{name} of shape {tuple(freqs.shape)} for head dim {split[1]}"
        if freqs.shape[0] != 1 and freqs.shape[0] < qkv.shape[0]:
            return f"{name} has {freqs.shape[0]} positions for a sequence of {qkv.shape[0]}"
    return None


def _fused_reason(qkv: torch.Tensor, q_freqs: torch.Tensor, k_freqs: torch.Tensor) -> str | None:
    if qkv.dtype not in _DTYPES:
        return f"dtype {qkv.dtype}"
    if q_freqs.requires_grad or k_freqs.requires_grad:
        return "freqs require grad"
    if q_freqs.shape[-1] != k_freqs.shape[-1]:
        return "query and key rotary widths differ"
    return kernel_unavailable(qkv, q_freqs, k_freqs)


def _split_then_rotate(
    qkv: torch.Tensor, q_freqs: torch.Tensor, k_freqs: torch.Tensor, g: int, hn: int, interleaved: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What megatron's split path computes, with upstream's unfused RoPE (the fallback)."""
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd

    s, b, ng, _ = qkv.shape
    query, key, value = torch.split(qkv, [g * hn, hn, hn], dim=3)
    query = query.reshape(s, b, ng * g, hn)
    query = _apply_rotary_pos_emb_bshd(query, q_freqs[:s], rotary_interleaved=interleaved)
    key = _apply_rotary_pos_emb_bshd(key, k_freqs[:s], rotary_interleaved=interleaved)
    return query, key, value
