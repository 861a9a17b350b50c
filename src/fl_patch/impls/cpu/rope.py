"""``apply_rope_fusion=True`` on the CPU: the fused RoPE functions megatron looks up, computed on the host.

Why: with ``TransformerConfig(apply_rope_fusion=True)`` megatron-core 0.19.2 applies RoPE
through ``rope_utils.fused_apply_rotary_pos_emb`` (``sbhd``) and
``fused_apply_rotary_pos_emb_thd`` (packed ``thd``, with context parallelism), both
imported from ``megatron.core.extensions.transformer_engine`` and ``None`` without
Transformer Engine. ``TransformerConfig.__post_init__`` then refuses the config ("apply_rope_fusion
is not available. Please install TE >= 1.4", ``transformer_config.py`` line 2186), so a
GPU recipe (most set it) does not even build on a CPU: 40 of Megatron-LM's unit tests ask
for it (issue 27).

How: the two names in ``rope_utils`` become the functions below, with TE's signatures and
TE's semantics (``transformer_engine.pytorch.attention.rope.apply_rotary_pos_emb(...,
fused=True)``): the rotated part (the first ``freqs.shape[-1]`` channels) is computed in
float32 and cast back to the input's dtype, as TE's kernel does, the rest passes through;
``interleaved`` rotates adjacent pairs. ``thd`` gives each packed sequence positions from 0
(its CP slice: the front and back chunks of this rank, as TE and megatron's
load-balanced CP layout do). Plain torch ops: autograd gives the backward. Megatron's own
checks still apply (``rotary_interleaved`` with the fusion asks ``is_te_min_version("2.3.0")``
and is refused: the TE version answered without TE is 0.0.0, ``te_version.py``).
Not covered: multi-latent attention's fused RoPE (``fused_mla_yarn_rope_apply``, Triton).

Upstream reference: megatron-core 0.19.2 ``megatron/core/models/common/embeddings/rope_utils.py``
(``apply_rotary_pos_emb``, ``_apply_rotary_pos_emb_bshd``, ``_get_thd_freqs_on_this_cp_rank``),
``megatron/core/extensions/transformer_engine.py`` (``fused_apply_rotary_pos_emb*``).
Drop when: megatron falls back to its unfused path where the fused functions are absent.
"""

from __future__ import annotations

import itertools

import torch

__all__ = ["fused_apply_rotary_pos_emb", "fused_apply_rotary_pos_emb_thd", "rotate"]


def rotate(t: torch.Tensor, freqs: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """``t`` (``[..., d]``) rotated by the angles ``freqs`` (broadcast to ``t[..., :freqs.shape[-1]]``), in float32."""
    rot = freqs.shape[-1]
    if rot % 2 or rot > t.shape[-1]:
        raise ValueError(
            f"fused RoPE (fl_patch CPU pack): freqs' last dimension {rot} must be even and at most the input's {t.shape[-1]}"
        )
    x, passed = t[..., :rot], t[..., rot:]
    xf = x.float()
    angles = freqs.float()
    if interleaved:
        pairs = xf.unflatten(-1, (rot // 2, 2))  # (x0, x1), (x2, x3), ...
        first, second = pairs[..., 0], pairs[..., 1]
        turned = torch.stack((-second, first), dim=-1).flatten(-2)
    else:
        first, second = xf[..., : rot // 2], xf[..., rot // 2 :]
        turned = torch.cat((-second, first), dim=-1)
    out = (xf * torch.cos(angles) + turned * torch.sin(angles)).to(t.dtype)
    return torch.cat((out, passed), dim=-1) if passed.shape[-1] else out


def fused_apply_rotary_pos_emb(
    t: torch.Tensor, freqs: torch.Tensor, transpose_output_memory: bool = False, interleaved: bool = False
) -> torch.Tensor:
    """Stand-in for ``rope_utils.fused_apply_rotary_pos_emb``: ``t`` is ``[s, b, h, d]``, ``freqs`` ``[s, 1 or b, 1, rot]``.

    ``transpose_output_memory`` is accepted and ignored, as megatron's TE wrapper does (a memory layout only).
    """
    del transpose_output_memory
    if t.dim() != 4 or freqs.dim() != 4 or freqs.shape[0] < t.shape[0]:
        raise ValueError(
            f"fused RoPE (fl_patch CPU pack): expects t [s, b, h, d] and freqs [>= s, 1, 1, rot]; got {tuple(t.shape)} "
            f"and {tuple(freqs.shape)}"
        )
    return rotate(t, freqs[: t.shape[0]], interleaved)


def _thd_positions(cu_seqlens: torch.Tensor, cp_size: int, cp_rank: int) -> torch.Tensor:
    """The position of each local token of a packed batch: from 0 per sequence, this CP rank's front and back chunks."""
    bounds = [int(v) for v in cu_seqlens.tolist()]
    pieces = []
    for start, end in itertools.pairwise(bounds):
        full = end - start
        if full % cp_size or (cp_size > 1 and (full // cp_size) % 2):
            raise ValueError(
                f"fused RoPE thd (fl_patch CPU pack): sequence length {full} must split into 2 x cp_size={cp_size} chunks"
            )
        local = full // cp_size
        if cp_size == 1:
            pieces.append(torch.arange(local))
        else:
            half = local // 2
            pieces.append(torch.arange(cp_rank * half, (cp_rank + 1) * half))
            pieces.append(torch.arange(full - (cp_rank + 1) * half, full - cp_rank * half))
    return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.long)


def fused_apply_rotary_pos_emb_thd(
    t: torch.Tensor,
    cu_seqlens: torch.Tensor,
    freqs: torch.Tensor,
    cp_size: int = 1,
    cp_rank: int = 0,
    interleaved: bool = False,
) -> torch.Tensor:
    """Stand-in for ``rope_utils.fused_apply_rotary_pos_emb_thd``: ``t`` is ``[tokens, h, d]``, ``freqs`` ``[max_s, 1, 1, rot]``.

    ``cu_seqlens`` are the whole (pre-CP) cumulative lengths, as megatron passes them.
    """
    positions = _thd_positions(cu_seqlens, cp_size, cp_rank)
    if positions.numel() != t.shape[0]:
        raise ValueError(
            f"fused RoPE thd (fl_patch CPU pack): cu_seqlens {cu_seqlens.tolist()} with cp_size={cp_size} give "
            f"{positions.numel()} local tokens; t has {t.shape[0]}"
        )
    if positions.numel() and int(positions.max()) >= freqs.shape[0]:
        raise ValueError(
            f"fused RoPE thd (fl_patch CPU pack): a sequence needs position {int(positions.max())}; freqs has {freqs.shape[0]}"
        )
    angles = freqs.reshape(freqs.shape[0], -1)[positions.to(freqs.device)]  # [tokens, rot]
    return rotate(t, angles.unsqueeze(1), interleaved)
