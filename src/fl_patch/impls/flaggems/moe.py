"""MoE token permutation (``--moe-permute-fusion``) on the pack's kernels.

Why: without TE, fl_patch serves TE's fused permutation functions in torch
(``fl_patch.impls.cpu.moe_fusions``): a row gather and an ``index_add`` by an index built with
scatters, several launches per call and, on a GPU, an atomic (run-to-run varying) unpermute sum.
How: its two row-movement functions, ``permute_rows`` and ``unpermute_rows``, take the call on the
pack's kernels (``kernels/moe_permute.py``: one program per token and column block, the token's
rows read from the row map, fp32 sums in a fixed order, no atomics) where they can run, and hand
the rest to the torch functions, saying why once.
Upstream reference: megatron-core 0.19.2 ``transformer/moe/moe_utils.py`` (``permute``/``unpermute``
with ``fused=True``), TE's ``moe_permute``/``moe_unpermute`` semantics.
When to drop: where TE is installed (``moe_fusions`` is then not registered).
"""

from __future__ import annotations

import torch

import fl_patch

from . import ops
from ._runtime import fallback, kernel_unavailable

__all__ = ["PERMUTE_ROWS", "UNPERMUTE_ROWS", "permute_rows", "unpermute_rows"]

PERMUTE_ROWS = "fl_patch.impls.cpu.moe_fusions.permute_rows"
UNPERMUTE_ROWS = "fl_patch.impls.cpu.moe_fusions.unpermute_rows"
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _reason(x: torch.Tensor, row_id_map: torch.Tensor, weights: torch.Tensor | None) -> str | None:
    if x.dim() != 2 or x.dtype not in _DTYPES:
        return f"input of {x.dim()} dimensions, dtype {x.dtype}"
    if row_id_map.dtype != torch.int32 or row_id_map.dim() != 2:
        return f"row map {row_id_map.dtype} of {row_id_map.dim()} dimensions"
    if weights is not None and weights.dtype not in _DTYPES:
        return f"weights of dtype {weights.dtype}"
    return kernel_unavailable(x, row_id_map, *(() if weights is None else (weights,)))


def permute_rows(
    tokens: torch.Tensor, row_id_map: torch.Tensor, num_rows: int, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """``moe_fusions.permute_rows`` on the pack's scatter kernel."""
    reason = _reason(tokens, row_id_map, weights)
    if reason is not None:
        fallback("moe_permute", reason)
        return fl_patch.original(PERMUTE_ROWS)(tokens, row_id_map, num_rows, weights)
    return ops.moe_permute_rows(tokens, row_id_map, num_rows, weights)


def unpermute_rows(
    permuted: torch.Tensor, row_id_map: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """``moe_fusions.unpermute_rows`` on the pack's gather kernel."""
    reason = _reason(permuted, row_id_map, weights)
    if reason is not None:
        fallback("moe_unpermute", reason)
        return fl_patch.original(UNPERMUTE_ROWS)(permuted, row_id_map, weights)
    return ops.moe_unpermute_rows(permuted, row_id_map, weights)
