"""Transformer Engine's layer spec on the pack's kernels, where TE is absent (TE-FL without a fork).

Why: ``transformer_impl="transformer_engine"`` is megatron's default and what
``pretrain_gpt.py`` and most recipes build. Without TE, fl_patch serves TE's modules in
plain torch (``fl_patch.impls.te.modules``, ``docs/te_spec.md``): TE's module tree and
parameter names, megatron's tensor-parallel layers underneath. Their maths goes through three
module functions, ``norm``, ``attention`` and ``grouped_matmul``; on a GPU those are torch's
eager ops (``F.rms_norm``, SDPA with whatever backend torch picks, one GEMM per expert). This
module puts the pack's kernels behind them, so the TE spec runs as fast as the pack's local
spec, and gives MoE's weighted SwiGLU (``TEGroupedMLP`` with ``bias_activation_fusion``) the
pack's SwiGLU kernel instead of a ``torch.compile``-d function.

How: each function takes the call where its kernel can and hands the rest to the function it
replaces (``fl_patch.original``), saying why once (``_runtime.fallback``):

- ``norm``: RMSNorm / LayerNorm with TE's zero-centred gamma (the weight stored as gamma - 1),
  on ``ops.rms_norm`` / ``ops.layer_norm``: the norm of ``TELayerNormColumnParallelLinear``
  and ``TENorm``.
- ``attention``: ``TEDotProductAttention``'s core (``[b, heads, s, d]`` views) on
  ``ops.flash_attention`` (cuDNN's fused attention, the pack's Triton kernel where cuDNN
  declines or in deterministic mode), for causal or unmasked calls without dropout whose k
  and v have q's head size; padding or arbitrary masks, dropout and MLA's different v head
  size stay on SDPA.
- ``grouped_matmul``: the experts' GEMMs as one grouped GEMM (``torch._grouped_mm``, CUTLASS)
  instead of one cuBLAS call per expert, checked once per (dtype, device) against the per-expert
  loop, forward and backward, on a small case before it is trusted; where it is missing,
  declines the sizes (not 16-byte aligned) or the check fails, the loop runs, said once.
- ``weighted_bias_swiglu_impl``: ``silu(a) * g`` on the pack's SwiGLU kernel, then the routing
  weight, as upstream's ``weighted_swiglu`` computes it (result in the input's dtype).

Upstream reference: megatron-core 0.19.2 ``extensions/transformer_engine.py`` (TE's
``LayerNormLinear``, ``DotProductAttention``, ``GroupedLinear``), ``transformer/moe/experts.py``
(``TEGroupedMLP.forward`` -> ``weighted_bias_swiglu_impl``), ``fusions/fused_bias_swiglu.py``.
When to drop: when TransformerEngine-FL (or TE) is installed: ``te_modules`` is then not
registered and these functions are never reached.
"""

from __future__ import annotations

import itertools
import threading

import torch

import fl_patch

from . import ops
from ._runtime import fallback, kernel_unavailable, later_parameters_reason

__all__ = [
    "ATTENTION",
    "GROUPED_MATMUL",
    "NORM",
    "WEIGHTED_SWIGLU",
    "attention",
    "grouped_matmul",
    "norm",
    "norm_reason",
    "weighted_bias_swiglu_impl",
]

_TE = "fl_patch.impls.te.modules"
NORM = f"{_TE}.norm"
ATTENTION = f"{_TE}.attention"
GROUPED_MATMUL = f"{_TE}.grouped_matmul"
WEIGHTED_SWIGLU = "megatron.core.fusions.fused_bias_swiglu.weighted_bias_swiglu_impl"
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_WIDTH = 32768  # kernels/norms.py MAX_WIDTH (not imported: that module imports triton)


# --------------------------------------------------------------------------- norm
def norm_reason(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> str | None:
    """Why the pack's norm kernels cannot take this call (None: they can)."""
    if x.dtype not in _DTYPES:
        return f"dtype {x.dtype}"
    if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        return f"input {x.dtype} with weight {weight.dtype}"
    if x.shape[-1] > MAX_WIDTH:
        return f"hidden size {x.shape[-1]} > {MAX_WIDTH}"
    return kernel_unavailable(x, weight)


def norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float, rms: bool, zero_centered_gamma: bool
) -> torch.Tensor:
    """TE's LayerNorm / RMSNorm (``te_modules.norm``) on the pack's norm kernels."""
    op = "te_rms_norm" if rms else "te_layer_norm"
    reason = norm_reason(x, weight, bias)
    if reason is not None:
        fallback(op, reason)
        return fl_patch.original(NORM)(x, weight, bias, eps, rms, zero_centered_gamma)
    gamma = weight + 1 if zero_centered_gamma else weight  # autograd carries the gradient back to weight
    if rms:
        return ops.rms_norm(x, gamma, eps)
    return ops.layer_norm(x, gamma, bias, eps)


# --------------------------------------------------------------------------- attention
def _attention_reason(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, dropout_p: float
) -> str | None:
    if mask is not None:
        return "an explicit (padding or arbitrary) attention mask"
    if dropout_p > 0.0:
        return "attention dropout > 0 in training"
    if query.dim() != 4 or key.shape != value.shape:
        return "k and v of different shapes (multi-latent attention's v head size)"
    if not (query.dtype == key.dtype == value.dtype) or query.dtype not in _DTYPES:
        return f"dtypes q {query.dtype}, k {key.dtype}, v {value.dtype}"
    if query.shape[1] % key.shape[1]:
        return "query heads not a multiple of key/value heads"
    return kernel_unavailable(query, key, value)


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    dropout_p: float,
    scale: float,
) -> torch.Tensor:
    """``te_modules.attention`` (``[b, heads, s, d]`` in and out) on the pack's flash attention."""
    reason = _attention_reason(query, key, value, mask, dropout_p)
    sq, sk = query.shape[2], key.shape[2]
    causal = causal and sq > 1
    if reason is None:
        reason = ops.attention_reason(sq, sk, causal, query.shape[-1])
    if reason is not None:
        fallback("te_attention", reason)
        return fl_patch.original(ATTENTION)(query, key, value, mask, causal, dropout_p, scale)
    # [b, h, s, d] views of megatron's [s, b, h, d] tensors: permuting back is free, and the pack's
    # kernels take megatron's layout (its output is [s, b, h, d]; te_modules permutes it back again)
    q, k, v = (t.permute(2, 0, 1, 3) for t in (query, key, value))
    return ops.flash_attention(q, k, v, causal, scale).permute(1, 2, 0, 3)


# --------------------------------------------------------------------------- grouped GEMM
_grouped_ok: dict[tuple[torch.dtype, str], str | None] = {}  # (dtype, device type) -> None (works) or why not
_grouped_lock = threading.Lock()


def _loop(x: torch.Tensor, weights: list[torch.Tensor], splits: list[int]) -> torch.Tensor:
    """The per-expert reference (``te_modules.per_expert_matmul``), imported when the self-check runs: this module
    also serves a megatron target (the weighted SwiGLU) that can load before the TE modules and their imports."""
    from fl_patch.impls.te.modules import per_expert_matmul

    return per_expert_matmul(x, weights, splits)


def _grouped(x: torch.Tensor, weights: list[torch.Tensor], splits: list[int]) -> torch.Tensor:
    stacked = torch.stack(weights).transpose(-2, -1)  # [experts, in, out]: the [out, in] weights, transposed
    # the groups' end rows, summed on the host (the splits are host integers): one small copy, no extra kernel
    offsets = torch.tensor(list(itertools.accumulate(splits)), dtype=torch.int32, device=x.device)
    return torch._grouped_mm(x, stacked, offs=offsets)


def _check_grouped(dtype: torch.dtype, device: torch.device) -> str | None:
    """None if ``torch._grouped_mm`` gives the per-expert loop's result, forward and backward, here; else why not."""
    if not hasattr(torch, "_grouped_mm"):
        return f"torch {torch.__version__} has no _grouped_mm"
    generator = torch.Generator(device="cpu").manual_seed(0)
    splits = [24, 0, 40, 16]
    x0 = torch.randn(sum(splits), 64, generator=generator).to(device, dtype)
    w0 = [torch.randn(32, 64, generator=generator).to(device, dtype) for _ in splits]
    g0 = torch.randn(sum(splits), 32, generator=generator).to(device, dtype)
    results = []
    try:
        for fn in (_grouped, _loop):
            x = x0.clone().requires_grad_(True)
            ws = [w.clone().requires_grad_(True) for w in w0]
            out = fn(x, ws, splits)
            out.backward(g0)
            results.append([out, x.grad, *(w.grad for w in ws)])
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        return f"torch._grouped_mm failed on {device.type} {dtype}: {str(exc).splitlines()[0][:160]}"
    bound = 1e-5 if dtype == torch.float32 else 2e-2
    for got, want in zip(*results, strict=True):
        error = ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()
        if error > bound:
            return f"torch._grouped_mm differs from the per-expert loop on {device.type} {dtype} (rel. {error:.2g})"
    return None


def _grouped_reason(x: torch.Tensor, weights: list[torch.Tensor]) -> str | None:
    if x.device.type != "cuda":
        return f"input on {x.device.type} (the grouped GEMM needs CUDA)"
    if x.dim() != 2 or any(w.dtype != x.dtype or w.shape != weights[0].shape for w in weights):
        return "weights of different shapes or dtypes"
    if x.dtype not in (torch.bfloat16,):
        return f"dtype {x.dtype} (torch's grouped GEMM takes bf16)"
    out_features, in_features = weights[0].shape
    if in_features % 8 or out_features % 8:
        return f"sizes {in_features} -> {out_features} not multiples of 8 (16-byte rows)"
    key = (x.dtype, x.device.type)
    if key not in _grouped_ok:
        with _grouped_lock:
            if key not in _grouped_ok:
                _grouped_ok[key] = _check_grouped(x.dtype, x.device)
    return _grouped_ok[key]


def grouped_matmul(x: torch.Tensor, weights: list[torch.Tensor], splits: list[int]) -> torch.Tensor:
    """TE's grouped GEMM (``te_modules.grouped_matmul``): one grouped kernel for all experts where it can run."""
    reason = _grouped_reason(x, weights) if len(weights) > 1 else "one expert"
    if reason is not None:
        fallback("te_grouped_gemm", reason)
        return fl_patch.original(GROUPED_MATMUL)(x, weights, splits)
    return _grouped(x, weights, splits)


# --------------------------------------------------------------------------- MoE weighted SwiGLU
def weighted_bias_swiglu_impl(
    input: torch.Tensor,
    bias: torch.Tensor | None,
    weights: torch.Tensor,
    fp8_input_store: bool = False,
    *args: object,
    **kwargs: object,
) -> torch.Tensor:
    """megatron's ``weighted_bias_swiglu_impl``: ``silu(a) * g`` on the pack's kernel, times the routing weights.

    Parameters of later releases (main's ``clamp_value``) arrive in ``args``/``kwargs`` and go
    to upstream as passed; any set to a value falls back (the kernel has no clamp).
    """
    later = later_parameters_reason(("clamp_value",), args, kwargs)
    if later is not None:
        reason: str | None = later
    elif bias is not None:
        reason = "a bias (upstream raises NotImplementedError for it)"
    elif fp8_input_store:
        reason = "fp8 input store"
    elif input.dim() not in (2, 3) or input.dtype not in _DTYPES:
        reason = f"input of {input.dim()} dimensions, dtype {input.dtype}"
    else:
        reason = kernel_unavailable(input, weights)
    if reason is not None:
        fallback("moe_weighted_swiglu", reason)
        return fl_patch.original(WEIGHTED_SWIGLU)(input, bias, weights, fp8_input_store, *args, **kwargs)
    shape = input.shape
    rows = input.reshape(-1, shape[-1])
    out = (ops.swiglu(rows) * weights).to(input.dtype)  # upstream: swiglu(y) * weights, cast back to y's dtype
    return out if input.dim() == 2 else out.view(shape[0], shape[1], -1)
