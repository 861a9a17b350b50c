"""FlagGems 5.0.2 kernels behind the pack's op signatures, with their known defects worked around.

Why: the pack routes an op to FlagGems where FlagGems has a correct and fast kernel
(``FL_GEMS_BACKEND=op=flaggems`` selects one; docs/gpu_pack.md has the measured
choice). FlagGems' own entry points each have a condition under which they are
wrong; these wrappers only call them where they are right:

- ``rms_norm_backward``: given wrong gradients for a non-contiguous ``dy``: ``dy`` is
  made contiguous here before the call.
- ``layer_norm_backward``: takes ``input.shape[0]`` as the row count (3-D input gives
  wrong gradients and writes out of bounds): inputs are flattened to 2-D here.
- ``scaled_dot_product_attention`` is not wrapped: its backward always applies the
  causal mask, asserts the query length is a multiple of its block and a contiguous
  output gradient (its own autograd wrapper fails on megatron's permuted gradient),
  and, called with contiguous [b, h, s, d] copies at the GPT's training shape (GQA
  16/4 heads, seq 2048, head dim 128, bf16), its backward's autotuning hit an
  illegal memory access on an H200 (``bench/gpu_ops.py``, docs/gpu_pack.md).
- ``cross_entropy_loss`` is not wrapped: it returns the loss rounded to the input
  dtype (bf16 losses for bf16 logits), its loss for a target outside [0, V) differs
  from upstream's, its backward failed on logits with strided rows ("not enough
  values to unpack") on an H200, and it was 2x slower than this project's kernel.

How: each is a ``torch.autograd.Function`` calling FlagGems' forward and backward
functions directly (not ``flag_gems.enable()``, which would reroute every aten op of
the process). Imported only when a FlagGems backend is chosen.
Upstream reference: flag_gems 5.0.2 ``ops/rms_norm.py``, ``ops/layernorm.py``,
``fused/swiglu.py``.
When to drop a wrapper: when FlagGems fixes the defect it works around.
"""

from __future__ import annotations

import flag_gems
import torch
from flag_gems import fused as gems_fused
from flag_gems import ops as gems_ops

__all__ = ["layer_norm", "rms_norm", "swiglu"]

GEMS_VERSION = flag_gems.__version__


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        shape = [x.shape[-1]]
        y, inv_rms = gems_ops.rms_norm_forward(x, shape, weight, eps)
        ctx.save_for_backward(x, inv_rms, weight)
        ctx.eps = eps
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, inv_rms, weight = ctx.saved_tensors
        dx, dw = gems_ops.rms_norm_backward(dy.contiguous(), x, inv_rms, [x.shape[-1]], weight, ctx.eps)
        return dx.view(x.shape), dw.to(weight.dtype), None


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        y, mean, rstd = gems_ops.layer_norm(x2, [n], weight, bias, eps)
        ctx.save_for_backward(x2, weight, bias, mean, rstd)
        ctx.x_shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, None]:
        x2, weight, bias, mean, rstd = ctx.saved_tensors
        n = x2.shape[-1]
        dy2 = dy.reshape(-1, n).contiguous()
        mask = [True, ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2]]
        dx, dw, db = gems_ops.layer_norm_backward(dy2, x2, [n], mean, rstd, weight, bias, output_mask=mask)
        return dx.view(ctx.x_shape), dw, db, None


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y: torch.Tensor) -> torch.Tensor:
        y = y.contiguous()
        ctx.save_for_backward(y)
        return gems_fused.swiglu(y)

    @staticmethod
    def backward(ctx, dout: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return gems_fused.dswiglu(dout.contiguous(), y)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """FlagGems RMSNorm (contiguous ``dy`` guaranteed)."""
    return _RMSNorm.apply(x, weight, eps)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """FlagGems LayerNorm on a 2-D view of ``x`` (its backward assumes 2-D)."""
    return _LayerNorm.apply(x, weight, bias, eps)


def swiglu(y: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """FlagGems SwiGLU; a bias is added by torch first (FlagGems' kernel takes none)."""
    return _SwiGLU.apply(y if bias is None else y + bias)
