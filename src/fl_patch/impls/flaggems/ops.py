"""The pack's ops, each served by the backend ``_runtime.backend(op)`` picks: this project's kernel or FlagGems'.

Why a dispatch layer: the megatron-facing impls (norm.py, mlp.py, ...) decide
*whether* a call can leave upstream; these functions decide *which* kernel takes it.
The bench and the GPU tests call the same functions, so what is measured and tested
is what training runs. Kernel modules are imported on first use, never at import of
this module (it loads on machines without triton).
"""

from __future__ import annotations

import torch

from ._runtime import backend, deterministic, note_once

__all__ = [
    "attention_reason",
    "cross_entropy",
    "flash_attention",
    "layer_norm",
    "moe_permute_rows",
    "moe_row_id_map",
    "moe_sort_chunks",
    "moe_unpermute_rows",
    "rms_norm",
    "rotary",
    "swiglu",
    "vocab_parallel_cross_entropy",
]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension."""
    if backend("rms_norm") == "flaggems":
        from .gems import rms_norm as impl
    else:
        from .kernels.norms import rms_norm as impl
    return impl(x, weight, eps)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """LayerNorm over the last dimension."""
    if backend("layer_norm") == "flaggems":
        from .gems import layer_norm as impl
    else:
        from .kernels.norms import layer_norm as impl
    return impl(x, weight, bias, eps)


def swiglu(y: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """silu(a + bias_a) * (g + bias_g) for y = [a | g] along the last dimension."""
    if backend("swiglu") == "flaggems":
        from .gems import swiglu as impl
    else:
        from .kernels.swiglu import swiglu as impl
    return impl(y, bias)


def rotary(t: torch.Tensor, freqs: torch.Tensor, mscale: float, interleaved: bool) -> torch.Tensor:
    """RoPE of t [s, b, h, d] (FlagGems 5.0.2 has a forward-only rotary kernel: ours always)."""
    from .kernels.rope import rotary as impl

    return impl(t, freqs, mscale, interleaved)


def fused_qkv_rotary(
    mixed: torch.Tensor, q_freqs: torch.Tensor, k_freqs: torch.Tensor, g: int, hn: int, interleaved: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query and key of a fused QKV tensor rotated, value split off, in one launch (this project's kernel)."""
    from .kernels.rope import fused_qkv_rotary as impl

    return impl(mixed, q_freqs, k_freqs, g, hn, interleaved)


def attention_reason(sq: int, sk: int, causal: bool, head_dim: int) -> str | None:
    """None if the chosen attention backend takes this call, else why not."""
    if head_dim > 256:
        return f"head dim {head_dim} > 256"
    if causal and sq != sk:
        return "causal attention with sq != sk"
    return None


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float) -> torch.Tensor:
    """Attention of q [sq, b, hq, d] over k, v [sk, b, hkv, d]; [sq, b, hq, d] out.

    Backend "cudnn" (default): cuDNN's fused attention through torch SDPA (``sdpa.py``),
    where it takes the call; else, and with ``FL_GEMS_BACKEND=attention=triton``, this
    project's Triton flash attention. FlagGems 5.0.2's attention is not offered (wrong
    non-causal backward, crashed at the training shape)."""
    if backend("attention") == "cudnn" and deterministic():
        note_once("attention", "deterministic mode: the pack's Triton attention runs instead of cuDNN's")
    elif backend("attention") == "cudnn":
        from . import sdpa

        reason = sdpa.unsupported(q, k, v, causal)
        if reason is None:
            try:
                return sdpa.cudnn_attention(q, k, v, causal, sm_scale)
            except sdpa.Unsupported as exc:
                reason = str(exc)
        note_once("attention", f"cuDNN attention not used ({reason}): the pack's Triton kernel runs")
    from .kernels.attention import flash_attention as impl

    return impl(q, k, v, causal, sm_scale)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Per-token cross entropy over the last dimension (fp32 loss); this project's kernel (FlagGems 5.0.2's
    rounds the loss to bf16, differs from upstream for targets outside the vocabulary and failed on strided rows)."""
    from .kernels.cross_entropy import cross_entropy as impl

    return impl(logits, target, label_smoothing)


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, group: object, rank: int, world: int
) -> torch.Tensor:
    """Per-token cross entropy of logits split over the vocabulary across ``group`` (no label smoothing)."""
    from .kernels.cross_entropy import vocab_parallel_cross_entropy as impl

    return impl(logits, target, group, rank, world)


def moe_row_id_map(routing_map: torch.Tensor, num_out_tokens: int) -> torch.Tensor:
    """The MoE row map of ``moe_fusions.make_row_id_map`` (the same integers), built by the pack's kernels."""
    from .kernels.moe_permute import make_row_id_map as impl

    return impl(routing_map, num_out_tokens)


def moe_permute_rows(
    x: torch.Tensor, row_id_map: torch.Tensor, num_rows: int, probs: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """MoE tokens [tokens, hidden] copied to their rows (and each row's routing probability)."""
    from .kernels.moe_permute import permute_rows as impl

    return impl(x, row_id_map, num_rows, probs)


def moe_unpermute_rows(x: torch.Tensor, row_id_map: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Each token the fp32 sum of its rows of ``x`` (times weights if given), deterministic."""
    from .kernels.moe_permute import unpermute_rows as impl

    return impl(x, row_id_map, weights)


def moe_sort_chunks(
    x: torch.Tensor, sizes: torch.Tensor, order: torch.Tensor, probs: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Row chunks of ``sizes`` put in the order ``order`` (rows and probabilities alike), one launch each way."""
    from .kernels.moe_permute import sort_chunks as impl

    return impl(x, sizes, order, probs)
