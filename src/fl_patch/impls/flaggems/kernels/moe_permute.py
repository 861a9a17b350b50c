"""MoE token permutation: each token copied to its experts' rows, and the rows summed back per token.

Why: megatron's permutation without TE is ``index_select`` by a token index built with an argsort of
the whole routing map, and its unpermutation a ``scatter_add_`` (atomics: the order of a token's sums,
so the result, varies run to run) into a buffer in the rows' dtype; TE's fused kernels are what
``--moe-permute-fusion`` asks for, and there is no TE here.

How: the row map of ``fl_patch.impls.cpu.moe_fusions.make_row_id_map`` (``int32 [tokens, 2E + 1]``:
a token's destination rows, their experts, their count) is read per token, so no program searches
and none writes where another does:

- ``_scatter_rows`` (permute, and unpermute's input gradient): one program per (token, column
  block) reads the token's row once and writes it, times ``weights[token, expert]`` if given, to
  each of its rows;
- ``_gather_rows`` (unpermute, and permute's input gradient): one program per (token, column
  block) sums the token's rows in fp32, each times its weight if given, in the map's order
  (experts ascending), and writes the token once: deterministic, no atomics;
- ``_weight_grad``: ``d weights[token, expert] = <a[token], b[row]>`` (a dot product per routed
  pair, over column blocks in one program).

Rows no token fills (when ``num_rows`` exceeds the routed count) are zero, forward and backward.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import next_power_of_2, rows, run

__all__ = ["PermuteRows", "UnpermuteRows", "permute_rows", "unpermute_rows"]


def _block(hidden: int) -> tuple[int, int]:
    block = min(4096, max(16, next_power_of_2(hidden)))
    return block, 4 if block <= 1024 else 8


@triton.jit
def _scatter_rows(
    X, W, MAP, OUT, H, E, MAP_WIDTH, stride_x, stride_out,
    HAS_W: tl.constexpr, BLOCK_H: tl.constexpr,
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


@triton.jit
def _gather_rows(
    X, W, MAP, OUT, H, E, MAP_WIDTH, stride_x, stride_out,
    HAS_W: tl.constexpr, BLOCK_H: tl.constexpr,
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


def _experts(row_id_map: torch.Tensor) -> int:
    return (row_id_map.shape[1] - 1) // 2


def _scatter(x: torch.Tensor, weights: torch.Tensor | None, row_id_map: torch.Tensor, num_rows: int) -> torch.Tensor:
    tokens, hidden = x.shape
    out = torch.zeros(num_rows, hidden, dtype=x.dtype, device=x.device)  # a row no token fills stays zero
    if tokens and hidden and num_rows:
        block, warps = _block(hidden)
        run(
            _scatter_rows, (tokens, -(-hidden // block)),
            x, weights if weights is not None else x, row_id_map, out, hidden, _experts(row_id_map),
            row_id_map.shape[1], x.stride(0), out.stride(0),
            HAS_W=weights is not None, BLOCK_H=block, num_warps=warps,
        )  # fmt: skip
    return out


def _gather(x: torch.Tensor, weights: torch.Tensor | None, row_id_map: torch.Tensor) -> torch.Tensor:
    tokens, hidden = row_id_map.shape[0], x.shape[1]
    out = torch.empty(tokens, hidden, dtype=x.dtype, device=x.device)
    if tokens and hidden:
        block, warps = _block(hidden)
        run(
            _gather_rows, (tokens, -(-hidden // block)),
            x, weights if weights is not None else x, row_id_map, out, hidden, _experts(row_id_map),
            row_id_map.shape[1], x.stride(0), out.stride(0),
            HAS_W=weights is not None, BLOCK_H=block, num_warps=warps,
        )  # fmt: skip
    return out


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


def _weights(weights: torch.Tensor | None) -> torch.Tensor | None:
    return None if weights is None else weights.contiguous()


class PermuteRows(torch.autograd.Function):
    """``[num_rows, hidden]``: each token at its rows, times ``weights[token, expert]`` when given."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, row_id_map: torch.Tensor, num_rows: int, weights: torch.Tensor | None
    ) -> torch.Tensor:
        x2 = rows(x, x.shape[-1])
        row_id_map = row_id_map.contiguous()
        w = _weights(weights)
        ctx.save_for_backward(x2 if w is not None else None, row_id_map, w)
        return _scatter(x2, w, row_id_map, num_rows)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None, torch.Tensor | None]:
        x2, row_id_map, w = ctx.saved_tensors
        g = rows(grad, grad.shape[-1])
        dx = _gather(g, w, row_id_map) if ctx.needs_input_grad[0] else None
        dw = _weights_grad(x2, g, row_id_map, w) if w is not None and ctx.needs_input_grad[3] else None
        return dx, None, None, dw


class UnpermuteRows(torch.autograd.Function):
    """``[tokens, hidden]``: the sum of each token's rows, each times ``weights[token, expert]`` when given."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, row_id_map: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        x2 = rows(x, x.shape[-1])
        row_id_map = row_id_map.contiguous()
        w = _weights(weights)
        ctx.save_for_backward(x2 if w is not None else None, row_id_map, w)
        ctx.num_rows = x2.shape[0]
        return _gather(x2, w, row_id_map)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, torch.Tensor | None]:
        x2, row_id_map, w = ctx.saved_tensors
        g = rows(grad, grad.shape[-1])
        dx = _scatter(g, w, row_id_map, ctx.num_rows) if ctx.needs_input_grad[0] else None
        dw = _weights_grad(g, x2, row_id_map, w) if w is not None and ctx.needs_input_grad[2] else None
        return dx, None, dw


def permute_rows(
    x: torch.Tensor, row_id_map: torch.Tensor, num_rows: int, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Each token of ``x`` [tokens, hidden] copied to its rows of a [num_rows, hidden] tensor."""
    return PermuteRows.apply(x, row_id_map, num_rows, weights)


def unpermute_rows(x: torch.Tensor, row_id_map: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Each token the fp32 sum of its rows of ``x`` [rows, hidden], rounded once to ``x``'s dtype."""
    return UnpermuteRows.apply(x, row_id_map, weights)
