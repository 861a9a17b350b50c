"""Transformer Engine's fused MoE functions without TE: ``--moe-permute-fusion`` and ``--moe-router-fusion``.

Why: megatron-core's MoE code takes its fused token permutation and fused router from TE
(``moe_utils.py``: ``fused_permute``, ``fused_unpermute``, ``fused_sort_chunks_by_index`` and their
``_with_probs`` forms; ``fused_topk_with_score_function``, ``fused_compute_score_for_moe_aux_loss``,
``fused_moe_aux_loss``), binds them to None without TE, and then refuses the two flags recipes for
DeepSeek/Qwen-style MoE pass: ``ValueError: fused permutation is not available. Please install TE >=
2.1.0`` (``TransformerConfig.__post_init__``) and ``fused_topk_with_score_function is not available``
(at the first routing).

How: this module provides those functions with TE's call signatures and semantics, and
``HAVE_TE = True`` for ``moe_utils`` alone, where that name gates nothing but these functions'
branches (``if not HAVE_TE or fused_x is None: raise``; ``tests/impls/test_te_moe_fusions.py`` re-reads
megatron's source to keep that true).

- Permutation: the tokens routed by a ``[tokens, experts]`` routing map are laid out expert by
  expert, tokens in order within an expert (what megatron's unfused ``permute`` gives), the rows past
  ``num_out_tokens`` dropped. The row map returned (opaque to megatron, which only hands it back to
  ``fused_unpermute``) is ``int32 [tokens, 2 * experts + 1]``: per token its destination rows (routed
  experts first, ascending, then -1), the experts of those rows, and how many there are. It is built
  with no host synchronisation. Unpermute sums a token's rows (weighted by ``merging_probs`` when
  given) in fp32. The row movement goes through :func:`permute_rows` and :func:`unpermute_rows`:
  torch here (vendor ``cpu``); the FlagGems pack puts its Triton kernels behind them
  (``fl_patch/impls/flaggems/moe.py``): deterministic, no atomics.
- Chunk sorting (the alltoall dispatcher's per-expert regrouping after the exchange): one gather by
  a row index built on the device (no ``.tolist()`` of the split sizes as megatron's unfused form).
- Router: megatron's own unfused maths (``topk_routing_with_score_function``,
  ``compute_routing_scores_for_aux_loss``, ``switch_load_balancing_loss_func`` with ``fused=False``):
  the same probabilities, routing map and loss as without the flag, on every vendor. No kernel: the
  router's tensors are ``[tokens, experts]``, small beside the experts' GEMMs.

Upstream reference: megatron-core 0.19.2 ``transformer/moe/moe_utils.py`` (``permute``, ``unpermute``,
``sort_chunks_by_idxs``, ``topk_routing_with_score_function``, ``compute_routing_scores_for_aux_loss``,
``switch_load_balancing_loss_func``), ``extensions/transformer_engine.py`` (TE's ``moe_permute``
family bound as ``fused_*``), ``transformer/transformer_config.py`` (the ``moe_permute_fusion`` check).
When to drop: where TE is installed (nothing here is registered then), or when megatron-core ships
these paths without TE.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "HAVE_TE",
    "MAKE_ROW_ID_MAP",
    "PERMUTE_ROWS",
    "SORT_CHUNKS",
    "UNPERMUTE_ROWS",
    "fused_compute_score_for_moe_aux_loss",
    "fused_moe_aux_loss",
    "fused_permute",
    "fused_permute_with_probs",
    "fused_sort_chunks_by_index",
    "fused_sort_chunks_by_index_with_probs",
    "fused_topk_with_score_function",
    "fused_unpermute",
    "make_row_id_map",
    "permute_rows",
    "sort_chunks",
    "unpermute_rows",
]

HAVE_TE = True
"""``moe_utils.HAVE_TE``: in that module it only guards the fused functions below (checked by the tests)."""

_HERE = "fl_patch.impls.te.moe_fusions"
MAKE_ROW_ID_MAP = f"{_HERE}.make_row_id_map"
PERMUTE_ROWS = f"{_HERE}.permute_rows"
UNPERMUTE_ROWS = f"{_HERE}.unpermute_rows"
SORT_CHUNKS = f"{_HERE}.sort_chunks"


# --------------------------------------------------------------------------- the row map
def make_row_id_map(routing_map: torch.Tensor, num_out_tokens: int) -> torch.Tensor:
    """``int32 [tokens, 2 * experts + 1]``: each token's destination rows (routed experts first, then -1), the
    experts of those rows, and their count; rows numbered expert by expert, tokens in order, below ``num_out_tokens``."""
    mask = routing_map.bool()
    tokens, experts = mask.shape
    flat = mask.t().reshape(-1).to(torch.int32)  # expert-major: expert 0's tokens, then expert 1's, ...
    dest = torch.cumsum(flat, 0, dtype=torch.int32) - 1
    dense = torch.where(flat.bool() & (dest < num_out_tokens), dest, -1).view(experts, tokens).t()
    ids = torch.arange(experts, device=mask.device, dtype=torch.int32)
    order = torch.argsort(torch.where(dense >= 0, ids, ids + experts), dim=1).to(torch.int32)  # routed first
    rows = dense.gather(1, order.long())
    count = (dense >= 0).sum(1, dtype=torch.int32)
    return torch.cat([rows, order, count[:, None]], dim=1).contiguous()


def _split_map(row_id_map: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    experts = (row_id_map.shape[1] - 1) // 2
    return row_id_map[:, :experts], row_id_map[:, experts : 2 * experts], experts


def _sources(row_id_map: torch.Tensor, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per permuted row: its token and expert (``tokens`` / 0 for a row no token fills), no host sync."""
    rows, experts, width = _split_map(row_id_map)
    tokens = row_id_map.shape[0]
    slot = torch.where(rows >= 0, rows, num_rows).reshape(-1).long()  # slot num_rows: the discarded extra one
    token_ids = torch.arange(tokens, device=row_id_map.device).repeat_interleave(width)
    src_token = torch.full((num_rows + 1,), tokens, dtype=torch.long, device=row_id_map.device)
    src_token.scatter_(0, slot, token_ids)
    src_expert = torch.zeros(num_rows + 1, dtype=torch.long, device=row_id_map.device)
    src_expert.scatter_(0, slot, experts.reshape(-1).long())
    return src_token[:num_rows], src_expert[:num_rows]


# --------------------------------------------------------------------------- row movement (the kernels' place)
def permute_rows(
    tokens: torch.Tensor, row_id_map: torch.Tensor, num_rows: int, probs: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[num_rows, hidden]``: each token copied to its rows (a row no token fills is zero), and with ``probs``
    ``[tokens, experts]`` each row's ``probs[token, expert]`` (0 for an unfilled row). Differentiable in both."""
    src_token, src_expert = _sources(row_id_map, num_rows)
    padded = torch.cat([tokens, tokens.new_zeros(1, tokens.shape[1])])  # row ``tokens``: the zero an unfilled row gets
    out = padded.index_select(0, src_token)
    if probs is None:
        return out, None
    return out, torch.cat([probs, probs.new_zeros(1, probs.shape[1])])[src_token, src_expert]


def unpermute_rows(
    permuted: torch.Tensor, row_id_map: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """``[tokens, hidden]``: the sum of each token's rows (each times ``weights[token, expert]`` when given), in fp32,
    rounded once to ``permuted``'s dtype. Differentiable in ``permuted`` and ``weights``."""
    tokens = row_id_map.shape[0]
    src_token, src_expert = _sources(row_id_map, permuted.shape[0])
    rows = permuted.float()
    if weights is not None:
        w = torch.cat([weights, weights.new_zeros(1, weights.shape[1])])[src_token, src_expert]
        rows = rows * w.float().unsqueeze(-1)
    out = rows.new_zeros(tokens + 1, permuted.shape[1]).index_add(0, src_token, rows)  # row ``tokens``: unfilled rows
    return out[:tokens].to(permuted.dtype)


def sort_chunks(
    inp: torch.Tensor, split_sizes: Any, sorted_index: Any, probs: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The row chunks of ``split_sizes`` in the order ``sorted_index`` (rows and, with ``probs``, their probabilities
    alike); the row index is built on the device, without reading the sizes on the host. Differentiable."""
    source = _chunk_rows(split_sizes, sorted_index, inp.device, inp.shape[0])
    return inp.index_select(0, source), None if probs is None else probs.index_select(0, source)


def _chunk_rows(split_sizes: Any, sorted_index: Any, device: torch.device, total: int) -> torch.Tensor:
    """For each output row, the input row it comes from, when the chunks of ``split_sizes`` are put in the order
    ``sorted_index``."""
    sizes = torch.as_tensor(split_sizes, device=device).long().reshape(-1)
    order = torch.as_tensor(sorted_index, device=device).long().reshape(-1)
    starts = torch.cumsum(sizes, 0) - sizes
    out_sizes = sizes[order]
    out_starts = torch.cumsum(out_sizes, 0) - out_sizes
    shift = torch.repeat_interleave(starts[order] - out_starts, out_sizes, output_size=total)
    return shift + torch.arange(total, device=device)


# --------------------------------------------------------------------------- TE's permutation API
def _given(probs: torch.Tensor | None, function: str) -> torch.Tensor:
    """The probabilities a row-movement function returned when given some (an impl that drops them is broken)."""
    if probs is None:
        raise TypeError(f"{_HERE}.{function} (as installed now) was given probabilities and returned none")
    return probs


def _num_out(routing_map: torch.Tensor, num_out_tokens: Any) -> int:
    if num_out_tokens is None or (isinstance(num_out_tokens, int) and num_out_tokens < 0):
        return int(routing_map.bool().sum())  # the caller gave no count: one host sync, as TE's
    return int(num_out_tokens)


def _mask_only(map_type: str, function: str) -> None:
    if map_type != "mask":
        raise ValueError(f"fl_patch's {function} (TE's, without TE) takes map_type='mask' only, not {map_type!r}")


def fused_permute(
    inp: torch.Tensor,
    routing_map: torch.Tensor,
    num_out_tokens: int = -1,
    max_token_num: int = -1,
    map_type: str = "mask",
) -> tuple[torch.Tensor, torch.Tensor]:
    """TE's ``moe_permute``: the routed tokens grouped by expert, and the row map ``fused_unpermute`` takes."""
    _mask_only(map_type, "fused_permute")
    num_out = _num_out(routing_map, num_out_tokens)
    row_id_map = make_row_id_map(routing_map, num_out)
    return permute_rows(inp, row_id_map, num_out)[0], row_id_map


def fused_permute_with_probs(
    inp: torch.Tensor, probs: torch.Tensor, routing_map: torch.Tensor, num_out_tokens: int = -1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TE's ``moe_permute_with_probs``: as :func:`fused_permute`, and each row's ``probs[token, expert]``."""
    num_out = _num_out(routing_map, num_out_tokens)
    row_id_map = make_row_id_map(routing_map, num_out)
    rows, permuted_probs = permute_rows(inp, row_id_map, num_out, probs)
    return rows, _given(permuted_probs, "permute_rows"), row_id_map


def fused_unpermute(
    inp: torch.Tensor,
    row_id_map: torch.Tensor,
    merging_probs: torch.Tensor | None = None,
    restore_shape: torch.Size | None = None,
    map_type: str = "mask",
    probs: torch.Tensor | None = None,
    pad_offsets: torch.Tensor | None = None,
) -> torch.Tensor:
    """TE's ``moe_unpermute``: each token the sum of its rows, weighted by ``merging_probs`` when given."""
    _mask_only(map_type, "fused_unpermute")
    if pad_offsets is not None:
        raise ValueError("fl_patch's fused_unpermute takes no pad_offsets (fused_permute_and_pad_with_probs is TE's)")
    if probs is not None:  # TE's older keyword for the same thing
        merging_probs = probs if merging_probs is None else merging_probs
    out = unpermute_rows(inp, row_id_map, merging_probs)
    if restore_shape is not None and tuple(out.shape) != tuple(restore_shape):
        out = out.view(restore_shape)
    return out


def fused_sort_chunks_by_index(inp: torch.Tensor, split_sizes: Any, sorted_index: Any) -> torch.Tensor:
    """TE's ``moe_sort_chunks_by_index``: the row chunks of ``split_sizes`` in the order ``sorted_index``."""
    return sort_chunks(inp, split_sizes, sorted_index)[0]


def fused_sort_chunks_by_index_with_probs(
    inp: torch.Tensor, probs: torch.Tensor, split_sizes: Any, sorted_index: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """TE's ``moe_sort_chunks_by_index_with_probs``: rows and their probabilities sorted alike."""
    rows, sorted_probs = sort_chunks(inp, split_sizes, sorted_index, probs)
    return rows, _given(sorted_probs, "sort_chunks")


# --------------------------------------------------------------------------- TE's router API: megatron's own maths
def _moe_utils() -> Any:
    import megatron.core.transformer.moe.moe_utils as moe_utils

    return moe_utils


def fused_topk_with_score_function(
    logits: torch.Tensor,
    topk: int,
    use_pre_softmax: bool = False,
    num_groups: int | None = None,
    group_topk: int | None = None,
    scaling_factor: float | None = None,
    score_function: str = "softmax",
    expert_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TE's ``fused_topk_with_score_function``: megatron's ``topk_routing_with_score_function(fused=False)``."""
    return _moe_utils().topk_routing_with_score_function(
        logits,
        topk,
        use_pre_softmax=use_pre_softmax,
        num_groups=num_groups,
        group_topk=group_topk,
        scaling_factor=scaling_factor,
        score_function=score_function,
        expert_bias=expert_bias,
        fused=False,
    )


def fused_compute_score_for_moe_aux_loss(
    logits: torch.Tensor, topk: int, score_function: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """TE's ``fused_compute_score_for_moe_aux_loss``: megatron's ``compute_routing_scores_for_aux_loss(fused=False)``."""
    return _moe_utils().compute_routing_scores_for_aux_loss(logits, topk, score_function, fused=False)


def fused_moe_aux_loss(
    probs: torch.Tensor,
    tokens_per_expert: torch.Tensor,
    total_num_tokens: int,
    num_experts: int,
    topk: int,
    coeff: float,
) -> torch.Tensor:
    """TE's ``fused_moe_aux_loss``: megatron's ``switch_load_balancing_loss_func(fused=False)``."""
    return _moe_utils().switch_load_balancing_loss_func(
        probs, tokens_per_expert, total_num_tokens, topk, num_experts, coeff, fused=False
    )
