"""MoE token permutation: each token copied to its experts' rows, and the rows summed back per token.

Why: megatron's permutation without TE is ``index_select`` by a token index built with an argsort of
the whole routing map, and its unpermutation a ``scatter_add_`` (atomics: the order of a token's sums,
so the result, varies run to run) into a buffer in the rows' dtype; TE's fused kernels are what
``--moe-permute-fusion`` asks for, and there is no TE here.

How: the row map of ``fl_patch.impls.te.moe_fusions.make_row_id_map`` (``int32 [tokens, 2E + 1]``:
a token's destination rows, their experts, their count) is read per token, so no program searches
and none writes where another does:

- ``_scatter_rows`` (permute, and unpermute's input gradient): one program per (token, column
  block) reads the token's row once and writes it, times ``weights[token, expert]`` if given, to
  each of its rows;
- ``_gather_rows`` (unpermute, and permute's input gradient): one program per (token, column
  block) sums the token's rows in fp32, each times its weight if given, in the map's order
  (experts ascending), and writes the token once: deterministic, no atomics;
- ``_weight_grad``: ``d weights[token, expert] = <a[token], b[row]>`` (a dot product per routed
  pair, over column blocks in one program);
- ``_map_columns`` and ``_map_rows`` build the row map itself: one program per expert scans its
  column of the routing map (rows numbered from the expert's start, the counts' prefix sum), then
  one program per block of tokens compacts each token's entries (routed experts first). Four
  launches where the torch form takes about fifteen: the MoE step is host-bound, launches count;
- ``_sort_chunks``: the alltoall dispatcher's per-expert regrouping, one launch: each program finds
  its rows' chunks from the split sizes and the order (prefix sums in the program), and copies the
  rows (and their probabilities); backward is the same map read the other way (no atomics).

The scatter also writes each row's routing probability, and the gather its gradient back to
``[tokens, experts]``. Rows no token fills (when ``num_rows`` exceeds the routed count) are zero,
forward and backward.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import next_power_of_2, rows, run

__all__ = [
    "PermuteRows",
    "SortChunks",
    "UnpermuteRows",
    "make_row_id_map",
    "permute_rows",
    "sort_chunks",
    "unpermute_rows",
]


def _block(hidden: int) -> tuple[int, int]:
    block = min(4096, max(16, next_power_of_2(hidden)))
    return block, 4 if block <= 1024 else 8


@triton.jit
def _map_columns(
    MASK, STARTS, DENSE, T, E, NUM_OUT, stride_mt, stride_me,
    BLOCK_T: tl.constexpr,
):  # fmt: skip
    expert = tl.program_id(0).to(tl.int64)
    start = tl.load(STARTS + expert).to(tl.int64)  # tokens routed to the experts before this one
    seen = tl.zeros([1], dtype=tl.int64)
    for t0 in range(0, T, BLOCK_T):
        token = t0 + tl.arange(0, BLOCK_T)
        inside = token < T
        routed = tl.load(MASK + token * stride_mt + expert * stride_me, mask=inside, other=0).to(tl.int64)
        row = start + seen + tl.cumsum(routed, axis=0) - 1
        keep = (routed > 0) & (row < NUM_OUT)
        tl.store(DENSE + token * E + expert, tl.where(keep, row, -1).to(tl.int32), mask=inside)
        seen += tl.sum(routed, axis=0)


@triton.jit
def _map_rows(
    DENSE, MAP, T, E, MAP_WIDTH,
    BLOCK_T: tl.constexpr, E_PAD: tl.constexpr,
):  # fmt: skip
    token = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)[:, None]
    expert = tl.arange(0, E_PAD)[None, :]
    inside = (token < T) & (expert < E)
    row = tl.load(DENSE + token * E + expert, mask=inside, other=-1)
    routed = ((row >= 0) & inside).to(tl.int32)
    count = tl.sum(routed, axis=1)
    others = (inside & (row < 0)).to(tl.int32)
    # routed experts first (ascending), then the others (ascending), as the torch form's argsort gives
    slot = tl.where(routed > 0, tl.cumsum(routed, axis=1) - 1, count[:, None] + tl.cumsum(others, axis=1) - 1)
    entry = MAP + token * MAP_WIDTH
    tl.store(entry + slot, row, mask=inside)
    tl.store(entry + E + slot, expert.to(tl.int32) + tl.zeros_like(row), mask=inside)
    tl.store(entry + 2 * E, count[:, None], mask=token < T)


@triton.jit
def _scatter_rows(
    X, W, PROBS, PROBS_OUT, MAP, OUT, H, E, MAP_WIDTH, stride_x, stride_out,
    HAS_W: tl.constexpr, HAS_PROBS: tl.constexpr, BLOCK_H: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cmask = cols < H
    x = tl.load(X + token * stride_x + cols, mask=cmask, other=0.0)
    entry = MAP + token * MAP_WIDTH
    n = tl.load(entry + 2 * E)
    for i in range(0, n):
        row = tl.load(entry + i).to(tl.int64)
        if HAS_W:
            expert = tl.load(entry + E + i).to(tl.int64)
            w = tl.load(W + token * E + expert).to(tl.float32)
            value = (x.to(tl.float32) * w).to(OUT.dtype.element_ty)
        else:
            value = x.to(OUT.dtype.element_ty)
        tl.store(OUT + row * stride_out + cols, value, mask=cmask)
        if HAS_PROBS:
            if tl.program_id(1) == 0:
                expert_p = tl.load(entry + E + i).to(tl.int64)
                tl.store(PROBS_OUT + row, tl.load(PROBS + token * E + expert_p))


@triton.jit
def _gather_rows(
    X, W, GRAD_PP, GRAD_P, MAP, OUT, H, E, MAP_WIDTH, stride_x, stride_out,
    HAS_W: tl.constexpr, HAS_PROBS: tl.constexpr, BLOCK_H: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cmask = cols < H
    entry = MAP + token * MAP_WIDTH
    n = tl.load(entry + 2 * E)
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    for i in range(0, n):
        row = tl.load(entry + i).to(tl.int64)
        x = tl.load(X + row * stride_x + cols, mask=cmask, other=0.0).to(tl.float32)
        if HAS_W:
            expert = tl.load(entry + E + i).to(tl.int64)
            x = x * tl.load(W + token * E + expert).to(tl.float32)
        acc += x
        if HAS_PROBS:  # permute's backward: each row's probability gradient back to [tokens, experts]
            if tl.program_id(1) == 0:
                expert_p = tl.load(entry + E + i).to(tl.int64)
                tl.store(GRAD_P + token * E + expert_p, tl.load(GRAD_PP + row))
    tl.store(OUT + token * stride_out + cols, acc.to(OUT.dtype.element_ty), mask=cmask)


@triton.jit
def _weight_grad(
    A, B, MAP, GW, H, E, MAP_WIDTH, stride_a, stride_b,
    BLOCK_H: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0).to(tl.int64)
    entry = MAP + token * MAP_WIDTH
    n = tl.load(entry + 2 * E)
    for i in range(0, n):
        row = tl.load(entry + i).to(tl.int64)
        expert = tl.load(entry + E + i).to(tl.int64)
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for start in range(0, H, BLOCK_H):
            cols = start + tl.arange(0, BLOCK_H)
            cmask = cols < H
            a = tl.load(A + token * stride_a + cols, mask=cmask, other=0.0).to(tl.float32)
            b = tl.load(B + row * stride_b + cols, mask=cmask, other=0.0).to(tl.float32)
            acc += a * b
        tl.store(GW + token * E + expert, tl.sum(acc, axis=0))


@triton.jit
def _sort_chunks(
    SRC, DST, P_SRC, P_DST, SIZES, ORDER, N, H, C, stride_src, stride_dst,
    REVERSE: tl.constexpr, HAS_P: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr, C_PAD: tl.constexpr,
):  # fmt: skip
    out_row = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    chunk = tl.arange(0, C_PAD)
    cmask = chunk < C
    sizes = tl.load(SIZES + chunk, mask=cmask, other=0).to(tl.int64)
    order = tl.load(ORDER + chunk, mask=cmask, other=0).to(tl.int64)
    out_sizes = tl.load(SIZES + order, mask=cmask, other=0).to(tl.int64)
    out_start = tl.cumsum(out_sizes, axis=0) - out_sizes
    # where output chunk j starts in the input: the sizes of the input chunks before chunk order[j]
    in_start = tl.sum(tl.where(chunk[None, :] < order[:, None], sizes[None, :], 0), axis=1)
    # each row's output chunk: the last one starting at or before it (empty chunks share a start)
    j = tl.sum(((out_start[None, :] <= out_row[:, None]) & cmask[None, :]).to(tl.int64), axis=1) - 1
    pick = chunk[None, :] == j[:, None]
    in_row = (
        tl.sum(tl.where(pick, in_start[None, :], 0), axis=1)
        + out_row
        - tl.sum(tl.where(pick, out_start[None, :], 0), axis=1)
    )
    rmask = out_row < N
    # forward: output row <- input row; REVERSE (the gradient): input row <- output row
    if REVERSE:
        read, write = out_row, in_row
    else:
        read, write = in_row, out_row
    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        m = rmask[:, None] & (cols < H)[None, :]
        v = tl.load(SRC + read[:, None] * stride_src + cols[None, :], mask=m, other=0.0)
        tl.store(DST + write[:, None] * stride_dst + cols[None, :], v, mask=m)
    if HAS_P:
        tl.store(P_DST + write, tl.load(P_SRC + read, mask=rmask, other=0.0), mask=rmask)


def _experts(row_id_map: torch.Tensor) -> int:
    return (row_id_map.shape[1] - 1) // 2


def make_row_id_map(routing_map: torch.Tensor, num_out_tokens: int) -> torch.Tensor:
    """``moe_fusions.make_row_id_map`` (the same map) in four launches: counts, their prefix sum, two kernels."""
    tokens, experts = routing_map.shape
    row_id_map = torch.empty(tokens, 2 * experts + 1, dtype=torch.int32, device=routing_map.device)
    if tokens == 0 or experts == 0:
        return row_id_map
    mask = routing_map if routing_map.dtype != torch.bool else routing_map.view(torch.uint8)
    counts = mask.sum(0, dtype=torch.int64)
    starts = torch.cumsum(counts, 0) - counts
    dense = torch.empty(tokens, experts, dtype=torch.int32, device=routing_map.device)
    run(
        _map_columns, (experts,),
        mask, starts, dense, tokens, experts, num_out_tokens, mask.stride(0), mask.stride(1),
        BLOCK_T=min(1024, max(16, next_power_of_2(tokens))), num_warps=4,
    )  # fmt: skip
    e_pad = max(2, next_power_of_2(experts))
    block_t = max(1, min(64, 4096 // e_pad))
    run(
        _map_rows, (-(-tokens // block_t),),
        dense, row_id_map, tokens, experts, row_id_map.shape[1],
        BLOCK_T=block_t, E_PAD=e_pad, num_warps=4,
    )  # fmt: skip
    return row_id_map


def _scatter(
    x: torch.Tensor,
    weights: torch.Tensor | None,
    row_id_map: torch.Tensor,
    num_rows: int,
    probs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    tokens, hidden = x.shape
    out = torch.zeros(num_rows, hidden, dtype=x.dtype, device=x.device)  # a row no token fills stays zero
    probs_out = None if probs is None else torch.zeros(num_rows, dtype=probs.dtype, device=x.device)
    if tokens and hidden and num_rows:
        block, warps = _block(hidden)
        run(
            _scatter_rows, (tokens, -(-hidden // block)),
            x, weights if weights is not None else x, probs if probs is not None else x,
            probs_out if probs_out is not None else x, row_id_map, out, hidden, _experts(row_id_map),
            row_id_map.shape[1], x.stride(0), out.stride(0),
            HAS_W=weights is not None, HAS_PROBS=probs is not None, BLOCK_H=block, num_warps=warps,
        )  # fmt: skip
    return out, probs_out


def _gather(
    x: torch.Tensor,
    weights: torch.Tensor | None,
    row_id_map: torch.Tensor,
    grad_permuted_probs: torch.Tensor | None = None,
    probs_like: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    tokens, hidden = row_id_map.shape[0], x.shape[1]
    out = torch.empty(tokens, hidden, dtype=x.dtype, device=x.device)
    grad_probs = None
    if grad_permuted_probs is not None:
        assert probs_like is not None
        grad_probs = torch.zeros(tokens, _experts(row_id_map), dtype=probs_like.dtype, device=x.device)
    if tokens and hidden:
        block, warps = _block(hidden)
        run(
            _gather_rows, (tokens, -(-hidden // block)),
            x, weights if weights is not None else x,
            grad_permuted_probs if grad_permuted_probs is not None else x, grad_probs if grad_probs is not None else x,
            row_id_map, out, hidden, _experts(row_id_map), row_id_map.shape[1], x.stride(0), out.stride(0),
            HAS_W=weights is not None, HAS_PROBS=grad_permuted_probs is not None, BLOCK_H=block, num_warps=warps,
        )  # fmt: skip
    return out, grad_probs


def _weights_grad(a: torch.Tensor, b: torch.Tensor, row_id_map: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[tokens, experts]``: <a[token], b[row]> at each routed (token, expert), zero elsewhere."""
    tokens, hidden = a.shape
    grad = torch.zeros(tokens, _experts(row_id_map), dtype=torch.float32, device=a.device)
    if tokens and hidden:
        block, warps = _block(min(hidden, 1024))
        run(
            _weight_grad, (tokens,),
            a, b, row_id_map, grad, hidden, _experts(row_id_map), row_id_map.shape[1], a.stride(0), b.stride(0),
            BLOCK_H=block, num_warps=warps,
        )  # fmt: skip
    return grad.to(like.dtype)


class PermuteRows(torch.autograd.Function):
    """``[num_rows, hidden]``: each token at its rows; with ``probs`` each row's ``probs[token, expert]`` too."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, row_id_map: torch.Tensor, num_rows: int, probs: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        x2 = rows(x, x.shape[-1])
        row_id_map = row_id_map.contiguous()
        probs = None if probs is None else probs.contiguous()
        ctx.save_for_backward(row_id_map, probs)
        ctx.mark_non_differentiable(row_id_map)
        return _scatter(x2, None, row_id_map, num_rows, probs)

    @staticmethod
    def backward(
        ctx, grad: torch.Tensor, grad_probs_out: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, None, None, torch.Tensor | None]:
        row_id_map, probs = ctx.saved_tensors
        g = rows(grad, grad.shape[-1])
        wants_probs = probs is not None and ctx.needs_input_grad[3]
        if wants_probs and grad_probs_out is None:
            grad_probs_out = torch.zeros(g.shape[0], dtype=probs.dtype, device=g.device)
        dx, dprobs = _gather(g, None, row_id_map, grad_probs_out if wants_probs else None, probs)
        return dx, None, None, dprobs


class UnpermuteRows(torch.autograd.Function):
    """``[tokens, hidden]``: the sum of each token's rows, each times ``weights[token, expert]`` when given."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, row_id_map: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        x2 = rows(x, x.shape[-1])
        row_id_map = row_id_map.contiguous()
        w = None if weights is None else weights.contiguous()
        ctx.save_for_backward(x2 if w is not None else None, row_id_map, w)
        ctx.num_rows = x2.shape[0]
        return _gather(x2, w, row_id_map)[0]

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, torch.Tensor | None]:
        x2, row_id_map, w = ctx.saved_tensors
        g = rows(grad, grad.shape[-1])
        dx = _scatter(g, w, row_id_map, ctx.num_rows)[0] if ctx.needs_input_grad[0] else None
        dw = _weights_grad(g, x2, row_id_map, w) if w is not None and ctx.needs_input_grad[2] else None
        return dx, None, dw


def _sort(
    src: torch.Tensor,
    sizes: torch.Tensor,
    order: torch.Tensor,
    probs: torch.Tensor | None,
    reverse: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    n, hidden = src.shape
    dst = torch.empty_like(src, memory_format=torch.contiguous_format)
    p_dst = None if probs is None else torch.empty_like(probs)
    chunks = sizes.numel()
    if n and chunks:
        c_pad = max(2, next_power_of_2(chunks))
        # a tile of about 8K elements (32 a thread at 8 warps): a 32 x 1024 tile spilled registers and made the
        # regrouping slower than megatron's split + cat at 8 experts (H200, bench/moe_permute.py)
        block_h = min(2048, max(16, next_power_of_2(hidden)))
        block_r = max(1, min(16, 8192 // block_h))
        run(
            _sort_chunks, (-(-n // block_r),),
            src, dst, probs if probs is not None else src, p_dst if p_dst is not None else src, sizes, order, n,
            hidden, chunks, src.stride(0), dst.stride(0),
            REVERSE=reverse, HAS_P=probs is not None, BLOCK_R=block_r, BLOCK_H=block_h, C_PAD=c_pad, num_warps=8,
        )  # fmt: skip
    return dst, p_dst


class SortChunks(torch.autograd.Function):
    """The row chunks of ``sizes`` in the order ``order`` (and the rows' probabilities alike)."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, sizes: torch.Tensor, order: torch.Tensor, probs: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        x2 = rows(x, x.shape[-1])
        probs = None if probs is None else probs.contiguous()
        ctx.save_for_backward(sizes, order)
        ctx.has_probs = probs is not None
        return _sort(x2, sizes, order, probs, reverse=False)

    @staticmethod
    def backward(
        ctx, grad: torch.Tensor, grad_probs: torch.Tensor | None
    ) -> tuple[torch.Tensor, None, None, torch.Tensor | None]:
        sizes, order = ctx.saved_tensors
        g = rows(grad, grad.shape[-1])
        gp = None
        if ctx.has_probs and ctx.needs_input_grad[3]:
            gp = grad_probs.contiguous() if grad_probs is not None else torch.zeros(g.shape[0], device=g.device)
        dx, dp = _sort(g, sizes, order, gp, reverse=True)
        return dx, None, None, dp


def permute_rows(
    x: torch.Tensor, row_id_map: torch.Tensor, num_rows: int, probs: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each token of ``x`` [tokens, hidden] copied to its rows of a [num_rows, hidden] tensor (and its probability)."""
    return PermuteRows.apply(x, row_id_map, num_rows, probs)


def unpermute_rows(x: torch.Tensor, row_id_map: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Each token the fp32 sum of its rows of ``x`` [rows, hidden], rounded once to ``x``'s dtype."""
    return UnpermuteRows.apply(x, row_id_map, weights)


def sort_chunks(
    x: torch.Tensor, sizes: torch.Tensor, order: torch.Tensor, probs: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The row chunks of ``sizes`` (device integers) in the order ``order``, rows and probabilities alike."""
    return SortChunks.apply(x, sizes.contiguous(), order.contiguous(), probs)
