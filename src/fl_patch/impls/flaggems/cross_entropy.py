"""Megatron-core's vocabulary cross entropy on the pack's kernels (one rank, or the vocabulary split over TP ranks).

Why: upstream's ``_VocabParallelCrossEntropy`` makes an fp32 copy of the [s, b, V]
logits, takes the max, subtracts, exponentiates, sums, divides, and saves the fp32
softmax for backward (4 bytes a logit: 1 GB at seq 2048, batch 4, vocab 32000);
about a dozen passes over V-wide rows in all, and three all-reduces that are no-ops
at TP=1.

How: ``tensor_parallel.cross_entropy.vocab_parallel_cross_entropy`` (and the name
``tensor_parallel.vocab_parallel_cross_entropy``, through which GPT's
``compute_language_model_loss`` calls it) and
``fusions.fused_cross_entropy.fused_vocab_parallel_cross_entropy`` are replaced.
When the vocabulary is not split (tensor-parallel group of size 1) the pack's
kernel computes the per-token loss in one read of the logits, saving one fp32
log-sum-exp per token; backward reads the logits once more and writes the gradient
in their dtype. Label smoothing follows megatron's definition; a target outside
[0, V) gets upstream's TP=1 result. With the vocabulary split over TP > 1 ranks, each
rank's kernel reads its logits once for its row max, sum of exponentials and target
logit, and two all-reduces (the maxima; then the rescaled sums with the target logits)
give the loss upstream's three all-reduces give; backward is the TP=1 kernel with the
rank's vocabulary offset. TP > 1 with label smoothing runs upstream (it smooths over
each rank's own partition; kept as it is), said once.

Upstream reference: megatron-core 0.19.2 ``megatron/core/tensor_parallel/cross_entropy.py``
(``vocab_parallel_cross_entropy``, ``VocabParallelCrossEntropy``),
``megatron/core/fusions/fused_cross_entropy.py``,
``megatron/core/models/common/language_module/language_module.py``
(``compute_language_model_loss``).
When to drop: when upstream's cross entropy stops materializing fp32 softmax.
"""

from __future__ import annotations

import torch
from megatron.core import parallel_state
from megatron.core.utils import get_pg_rank, get_pg_size

import fl_patch

from . import ops
from ._runtime import fallback, kernel_unavailable

__all__ = ["FUSED_TARGET", "TARGET", "fused_vocab_parallel_cross_entropy", "vocab_parallel_cross_entropy"]

TARGET = "megatron.core.tensor_parallel.cross_entropy.vocab_parallel_cross_entropy"
FUSED_TARGET = "megatron.core.fusions.fused_cross_entropy.fused_vocab_parallel_cross_entropy"
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _group(tp_group: object) -> object:
    return tp_group if tp_group is not None else parallel_state.get_tensor_model_parallel_group(False)


def _reason(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float, group: object) -> str | None:
    size = get_pg_size(group)
    if size > 1 and label_smoothing > 0:
        # upstream smooths over each rank's own partition (its vocab_size is the partition's): kept as it is
        return f"label smoothing with tensor-parallel size {size}"
    if logits.dtype not in _DTYPES:
        return f"logits dtype {logits.dtype}"
    if target.dtype not in (torch.int64, torch.int32) or target.shape != logits.shape[:-1]:
        return f"target {target.dtype} {tuple(target.shape)} for logits {tuple(logits.shape)}"
    if not 0.0 <= label_smoothing < 1.0:
        return f"label_smoothing {label_smoothing}"
    if logits.shape[-1] * size < 2:
        return "vocabulary of one"
    return kernel_unavailable(logits, target)


def _loss(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float, group: object) -> torch.Tensor:
    size = get_pg_size(group)
    if size > 1:
        return ops.vocab_parallel_cross_entropy(logits, target, group, get_pg_rank(group), size)
    return ops.cross_entropy(logits, target, label_smoothing)


def vocab_parallel_cross_entropy(
    vocab_parallel_logits: torch.Tensor,
    target: torch.Tensor,
    label_smoothing: float = 0.0,
    tp_group: torch.distributed.ProcessGroup | None = None,
) -> torch.Tensor:
    """Per-token cross entropy; the pack's kernel (TP=1, or the vocabulary split across ranks)."""
    group = _group(tp_group)
    reason = _reason(vocab_parallel_logits, target, label_smoothing, group)
    if reason is not None:
        fallback("cross_entropy", reason)
        return fl_patch.original(TARGET)(vocab_parallel_logits, target, label_smoothing, tp_group)
    return _loss(vocab_parallel_logits, target, label_smoothing, group)


def fused_vocab_parallel_cross_entropy(
    vocab_parallel_logits: torch.Tensor, target: torch.Tensor, tp_group: torch.distributed.ProcessGroup
) -> torch.Tensor:
    """``cross_entropy_loss_fusion`` with ``cross_entropy_fusion_impl='native'``, on the pack's kernel."""
    group = _group(tp_group)
    reason = _reason(vocab_parallel_logits, target, 0.0, group)
    if reason is not None:
        fallback("cross_entropy", reason)
        return fl_patch.original(FUSED_TARGET)(vocab_parallel_logits, target, tp_group)
    return _loss(vocab_parallel_logits, target, 0.0, group)
