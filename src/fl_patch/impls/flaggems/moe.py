"""MoE token permutation (``--moe-permute-fusion``) on the pack's kernels.

Why: without TE, fl_patch serves TE's fused permutation functions in torch
(``fl_patch.impls.te.moe_fusions``): the row map, the row movement and the chunk regrouping as
chains of small torch ops (about fifteen launches each), an ``index_add`` with atomics for the
unpermute sum. A MoE step on one GPU is host-bound (measured: ``docs/te_spec.md``), so launches
are what it costs.
How: the four functions ``moe_fusions`` moves tokens through take the call on the pack's kernels
(``kernels/moe_permute.py``) where they can run: ``make_row_id_map`` (4 launches), ``permute_rows``
(rows and routing probabilities in one kernel), ``unpermute_rows`` (fp32 sums in a fixed order, no
atomics), ``sort_chunks`` (one launch each way); each hands the rest to the torch function, saying
why once.
Upstream reference: megatron-core 0.19.2 ``transformer/moe/moe_utils.py`` (``permute``,
``unpermute``, ``sort_chunks_by_idxs`` with ``fused=True``), TE's ``moe_permute`` family's semantics.
When to drop: where TE is installed (``moe_fusions`` is then not registered).
"""

from __future__ import annotations

from typing import Any

import torch

import fl_patch

from . import ops
from ._runtime import fallback, kernel_unavailable

__all__ = [
    "MAKE_ROW_ID_MAP",
    "PERMUTE_ROWS",
    "SORT_CHUNKS",
    "UNPERMUTE_ROWS",
    "make_row_id_map",
    "permute_rows",
    "sort_chunks",
    "unpermute_rows",
]

_FUSIONS = "fl_patch.impls.te.moe_fusions"
MAKE_ROW_ID_MAP = f"{_FUSIONS}.make_row_id_map"
PERMUTE_ROWS = f"{_FUSIONS}.permute_rows"
UNPERMUTE_ROWS = f"{_FUSIONS}.unpermute_rows"
SORT_CHUNKS = f"{_FUSIONS}.sort_chunks"
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _rows_reason(x: torch.Tensor, *others: torch.Tensor | None) -> str | None:
    if x.dim() != 2 or x.dtype not in _DTYPES:
        return f"input of {x.dim()} dimensions, dtype {x.dtype}"
    present = [t for t in others if t is not None]
    if any(t.dtype not in _DTYPES for t in present if t.is_floating_point()):
        return "probabilities or weights of another dtype"
    return kernel_unavailable(x, *present)


def make_row_id_map(routing_map: torch.Tensor, num_out_tokens: int) -> torch.Tensor:
    """``moe_fusions.make_row_id_map`` on the pack's two map kernels."""
    reason = None if routing_map.dim() == 2 else f"routing map of {routing_map.dim()} dimensions"
    reason = reason or kernel_unavailable(routing_map)
    if reason is not None:
        fallback("moe_row_map", reason)
        return fl_patch.original(MAKE_ROW_ID_MAP)(routing_map, num_out_tokens)
    return ops.moe_row_id_map(routing_map, num_out_tokens)


def permute_rows(
    tokens: torch.Tensor, row_id_map: torch.Tensor, num_rows: int, probs: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``moe_fusions.permute_rows`` on the pack's scatter kernel."""
    reason = _rows_reason(tokens, row_id_map, probs)
    if reason is None and row_id_map.dtype != torch.int32:
        reason = f"row map of dtype {row_id_map.dtype}"
    if reason is not None:
        fallback("moe_permute", reason)
        return fl_patch.original(PERMUTE_ROWS)(tokens, row_id_map, num_rows, probs)
    return ops.moe_permute_rows(tokens, row_id_map, num_rows, probs)


def unpermute_rows(
    permuted: torch.Tensor, row_id_map: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """``moe_fusions.unpermute_rows`` on the pack's gather kernel."""
    reason = _rows_reason(permuted, row_id_map, weights)
    if reason is None and row_id_map.dtype != torch.int32:
        reason = f"row map of dtype {row_id_map.dtype}"
    if reason is not None:
        fallback("moe_unpermute", reason)
        return fl_patch.original(UNPERMUTE_ROWS)(permuted, row_id_map, weights)
    return ops.moe_unpermute_rows(permuted, row_id_map, weights)


def sort_chunks(
    inp: torch.Tensor, split_sizes: Any, sorted_index: Any, probs: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``moe_fusions.sort_chunks`` on the pack's chunk kernel (sizes and order as device integers)."""
    reason = _rows_reason(inp, probs)
    if reason is None and not (torch.is_tensor(split_sizes) and torch.is_tensor(sorted_index)):
        reason = "split sizes or order given as host lists"
    if reason is None and (split_sizes.device != inp.device or sorted_index.device != inp.device):
        reason = "split sizes or order on another device"
    if reason is not None:
        fallback("moe_sort_chunks", reason)
        return fl_patch.original(SORT_CHUNKS)(inp, split_sizes, sorted_index, probs)
    return ops.moe_sort_chunks(inp, split_sizes.reshape(-1), sorted_index.reshape(-1), probs)
