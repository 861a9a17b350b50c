"""Cross entropy over the vocabulary (one tensor-parallel rank), per token, forward and backward.

Why: upstream's ``_VocabParallelCrossEntropy`` (TP=1) makes an fp32 copy of the
[s, b, V] logits, then max, subtract, exp, sum, divide passes over it and keeps the
fp32 softmax for backward: about a dozen passes over V-wide rows and 4 bytes a logit
of saved memory. Here forward reads the logits once (online log-sum-exp) and keeps
one fp32 number a token; backward reads them once more and writes the gradient once,
in the logits' dtype.

How: one program per token row loops over the vocabulary in blocks, keeping a
running max and sum per lane (combined once at the end). Label smoothing follows
megatron's definition (``smoothing = alpha * V / (V - 1)``); a target outside
[0, V) gets upstream's (TP=1) result: loss log-sum-exp minus the row max, gradient
the softmax alone.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import next_power_of_2, rows, run

__all__ = ["CrossEntropyFunction", "VocabParallelCrossEntropyFunction", "cross_entropy", "vocab_parallel_cross_entropy"]

_NEG = -1.0e30  # finite "minus infinity": exp(_NEG - _NEG) stays 1, never NaN


def _block(vocab: int) -> tuple[int, int]:
    block = min(4096, next_power_of_2(vocab))
    return block, 4 if block <= 1024 else 8


@triton.jit
def _ce_fwd(
    X, TARGET, LOSS, LSE, V, stride_x, smoothing,
    SMOOTH: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    base = X + row * stride_x
    m_lane = tl.full([BLOCK], -1.0e30, dtype=tl.float32)
    s_lane = tl.zeros([BLOCK], dtype=tl.float32)
    x_sum = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < V
        x = tl.load(base + cols, mask=mask, other=-1.0e30).to(tl.float32)
        m_new = tl.maximum(m_lane, x)
        s_lane = s_lane * tl.exp(m_lane - m_new) + tl.where(mask, tl.exp(x - m_new), 0.0)
        m_lane = m_new
        if SMOOTH:
            x_sum += tl.where(mask, x, 0.0)
    m = tl.max(m_lane, axis=0)
    lse = m + tl.log(tl.sum(s_lane * tl.exp(m_lane - m), axis=0))
    target = tl.load(TARGET + row)
    valid = (target >= 0) & (target < V)
    safe = tl.where(valid, target, 0)
    # upstream (TP=1) subtracts the row max first and counts a target outside [0, V)
    # as predicted logit 0 of the shifted row: its loss is lse - max
    predicted = tl.where(valid, tl.load(base + safe).to(tl.float32), m)
    loss = lse - predicted
    if SMOOTH:
        mean_log_prob = tl.sum(x_sum, axis=0) / V - lse
        loss = (1.0 - smoothing) * loss - smoothing * mean_log_prob
    tl.store(LOSS + row, loss)
    tl.store(LSE + row, lse)


@triton.jit
def _ce_bwd(
    X, TARGET, LSE, GRAD, DX, V, stride_x, stride_dx, smoothing, vocab_start,
    BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    lse = tl.load(LSE + row)
    grad = tl.load(GRAD + row).to(tl.float32)
    target = tl.load(TARGET + row) - vocab_start  # this rank's column of the target (none if outside)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < V
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.exp(x - lse) - tl.where(cols == target, 1.0 - smoothing, 0.0) - smoothing / V
        tl.store(DX + row * stride_dx + cols, (d * grad).to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _ce_fwd_partial(
    X, TARGET, MAX, SUMEXP, PRED, V, stride_x, vocab_start,
    BLOCK: tl.constexpr,
):  # fmt: skip
    """One rank's share of a row split over the vocabulary: its max, sum of exp(x - max), the target's logit (0 if
    the target is another rank's)."""
    row = tl.program_id(0).to(tl.int64)
    base = X + row * stride_x
    m_lane = tl.full([BLOCK], -1.0e30, dtype=tl.float32)
    s_lane = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < V
        x = tl.load(base + cols, mask=mask, other=-1.0e30).to(tl.float32)
        m_new = tl.maximum(m_lane, x)
        s_lane = s_lane * tl.exp(m_lane - m_new) + tl.where(mask, tl.exp(x - m_new), 0.0)
        m_lane = m_new
    m = tl.max(m_lane, axis=0)
    target = tl.load(TARGET + row) - vocab_start
    local = (target >= 0) & (target < V)
    predicted = tl.where(local, tl.load(base + tl.where(local, target, 0)).to(tl.float32), 0.0)
    tl.store(MAX + row, m)
    tl.store(SUMEXP + row, tl.sum(s_lane * tl.exp(m_lane - m), axis=0))
    tl.store(PRED + row, predicted)


def _logits_grad(
    x2: torch.Tensor, target1: torch.Tensor, lse: torch.Tensor, grad: torch.Tensor, smoothing: float, *, start: int
) -> torch.Tensor:
    """d loss / d logits for rows ``x2`` whose columns begin at vocabulary index ``start``:
    one read of the logits, softmax minus the (smoothed) one-hot, times the incoming grad."""
    n, vocab = x2.shape
    grad1 = grad.reshape(-1)
    if not grad1.is_contiguous():
        grad1 = grad1.contiguous()
    dx = torch.empty((n, vocab), dtype=x2.dtype, device=x2.device)
    block, warps = _block(vocab)
    if n > 0:
        run(
            _ce_bwd, (n,), x2, target1, lse, grad1, dx, vocab, x2.stride(0), vocab, smoothing, start,
            BLOCK=block, num_warps=warps,
        )  # fmt: skip
    return dx


class CrossEntropyFunction(torch.autograd.Function):
    """Per-token loss of ``logits`` [..., V] against ``target`` [...]; fp32 loss, grad in the logits dtype."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, label_smoothing: float) -> torch.Tensor:
        vocab = logits.shape[-1]
        x2 = rows(logits, vocab)
        n = x2.shape[0]
        target1 = target.reshape(-1)
        if not target1.is_contiguous():
            target1 = target1.contiguous()
        smoothing = label_smoothing * vocab / (vocab - 1) if label_smoothing > 0 else 0.0
        loss = torch.empty(target.shape, dtype=torch.float32, device=logits.device)
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        block, warps = _block(vocab)
        if n > 0:
            run(
                _ce_fwd, (n,), x2, target1, loss, lse, vocab, x2.stride(0), smoothing,
                SMOOTH=smoothing > 0, BLOCK=block, num_warps=warps,
            )  # fmt: skip
        ctx.save_for_backward(x2, target1, lse)
        ctx.smoothing = smoothing
        ctx.logits_shape = logits.shape
        return loss

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        x2, target1, lse = ctx.saved_tensors
        dx = _logits_grad(x2, target1, lse, grad, ctx.smoothing, start=0)
        return dx.view(ctx.logits_shape), None, None


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Per-token cross entropy (no reduction), megatron's label smoothing."""
    return CrossEntropyFunction.apply(logits, target, label_smoothing)


class VocabParallelCrossEntropyFunction(torch.autograd.Function):
    """Per-token loss of logits split over the vocabulary across ``group`` (this rank holds columns
    [rank * V, (rank + 1) * V)), no label smoothing; megatron's ``_VocabParallelCrossEntropy``.

    Forward: one read of this rank's logits for its max, sum of exponentials and the target's
    logit; an all-reduce (max) of the row maxima and one (sum) of the rescaled sums and target
    logits together (upstream does three, over fp32 copies of the logits). Backward reads the
    logits once more, as at TP=1: softmax(x) minus the one-hot on the rank holding the target.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, group: object, rank: int, world: int) -> torch.Tensor:
        vocab = logits.shape[-1]
        x2 = rows(logits, vocab)
        n = x2.shape[0]
        target1 = target.reshape(-1)
        if not target1.is_contiguous():
            target1 = target1.contiguous()
        start = rank * vocab
        row_max = torch.empty(n, dtype=torch.float32, device=logits.device)
        sum_exp = torch.empty(n, dtype=torch.float32, device=logits.device)
        predicted = torch.empty(n, dtype=torch.float32, device=logits.device)
        block, warps = _block(vocab)
        if n > 0:
            run(
                _ce_fwd_partial, (n,), x2, target1, row_max, sum_exp, predicted, vocab, x2.stride(0), start,
                BLOCK=block, num_warps=warps,
            )  # fmt: skip
        global_max = row_max.clone()
        torch.distributed.all_reduce(global_max, op=torch.distributed.ReduceOp.MAX, group=group)
        sums = torch.stack([sum_exp * torch.exp(row_max - global_max), predicted])
        torch.distributed.all_reduce(sums, op=torch.distributed.ReduceOp.SUM, group=group)
        lse = global_max + torch.log(sums[0])
        # upstream: a target no rank holds counts as logit 0 of the max-shifted row
        valid = (target1 >= 0) & (target1 < vocab * world)
        loss = lse - torch.where(valid, sums[1], global_max)
        ctx.save_for_backward(x2, target1, lse)
        ctx.start, ctx.logits_shape = start, logits.shape
        return loss.view(target.shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None]:
        x2, target1, lse = ctx.saved_tensors
        dx = _logits_grad(x2, target1, lse, grad, 0.0, start=ctx.start)
        return dx.view(ctx.logits_shape), None, None, None, None


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, group: object, rank: int, world: int
) -> torch.Tensor:
    """Per-token cross entropy of vocabulary-split logits (no label smoothing), all-reduced over ``group``."""
    return VocabParallelCrossEntropyFunction.apply(logits, target, group, rank, world)
