"""SwiGLU of megatron-core's MLP on the pack's kernel.

Why: with ``bias_activation_fusion=False`` (the local spec's setting when nothing is
compiled) upstream's ``MLP.forward`` runs ``F.silu(x_glu) * x_linear`` on
``torch.chunk`` views: separate kernels and a bf16 intermediate forward, more in
backward. With ``bias_activation_fusion=True`` it calls ``bias_swiglu_impl``, which
is ``torch.compile`` (5-20 s of compile per shape) over the same arithmetic.

How: two patches.
- ``MLP.forward``: for a SwiGLU MLP (gated linear unit, ``F.silu``, no clamp, no
  linear offset, no TE activation module) it runs fc1, the pack's SwiGLU (which adds
  fc1's bias when there is one), fc2, and returns what upstream returns. Under fp8,
  where both linears run their GEMMs in fp8, the SwiGLU kernels also make the fp8
  casts of fc2's input and fc1's output gradient (``fp8_swiglu.py``). Anything else
  (``bias_activation_fusion=True`` included, which reaches the next patch, and a
  SequentialMLP expert's ``per_token_scale``, where torch's ops were measured faster) is
  upstream's forward.
- ``fused_bias_swiglu.bias_swiglu_impl``: the pack's SwiGLU unless FP8 input storage
  or CPU offloading of the input is asked for.
Each hands uncovered calls to upstream (``fl_patch.original``), saying why once.

Upstream reference: megatron-core 0.19.2 ``megatron/core/transformer/mlp.py``
(``MLP.forward``: fc1 -> activation -> fc2), ``megatron/core/fusions/fused_bias_swiglu.py``
(``bias_swiglu_impl``).
When to drop: when upstream's unfused path fuses SwiGLU itself (or the local spec
turns on a fused activation that needs no compile).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from megatron.core.typed_torch import apply_module

import fl_patch

from . import ops
from ._runtime import fallback, kernel_unavailable, later_parameters_reason

if TYPE_CHECKING:  # megatron has no types: these are Any to mypy, named for the reader
    from megatron.core.transformer.mlp import MLP

__all__ = ["MLP_FORWARD", "SWIGLU_IMPL", "bias_swiglu_impl", "mlp_forward"]

MLP_FORWARD = "megatron.core.transformer.mlp.MLP.forward"
SWIGLU_IMPL = "megatron.core.fusions.fused_bias_swiglu.bias_swiglu_impl"
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _mlp_reason(mlp: MLP, hidden_states: torch.Tensor, per_token_scale: object) -> str | None:
    config = mlp.config
    if config.use_te_activation_func:
        return "use_te_activation_func (TE's activation module)"
    if not config.gated_linear_unit or mlp.activation_func is not F.silu:
        return "activation is not SwiGLU (gated linear unit with F.silu)"
    if per_token_scale is not None:
        # an expert of SequentialMLP: a few hundred rows a call, where the kernel's host cost (136 + 164 us of
        # CPU a call, forward and backward, in an H200 profile: docs/gpu_runs_h200/session8_te_moe/
        # prof_moe_local.txt) is more than torch's few elementwise ops. The step did not measurably change
        # either way (0.82x upstream with the kernel here, 0.84x without, in separate calls: the MoE step is
        # host-bound on its per-expert GEMMs). TEGroupedMLP's weighted SwiGLU (one call for all experts,
        # te.py) takes the kernel.
        return "per_token_scale (a SequentialMLP expert: torch's ops are faster at an expert's row count)"
    if config.activation_func_clamp_value is not None:
        return "activation_func_clamp_value"
    if config.glu_linear_offset != 0:
        return "glu_linear_offset != 0"
    if hidden_states.dtype not in _DTYPES:
        return f"dtype {hidden_states.dtype}"
    return kernel_unavailable(hidden_states)


def mlp_forward(
    self: MLP, hidden_states: torch.Tensor, per_token_scale: torch.Tensor | None = None, **kwargs: object
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``MLP.forward`` with the SwiGLU on the pack's kernel (upstream's for everything else)."""
    if self.config.bias_activation_fusion and per_token_scale is None:
        # upstream calls bias_swiglu_impl (patched below) or a GELU fusion: nothing to take here
        return fl_patch.original(MLP_FORWARD)(self, hidden_states, per_token_scale, **kwargs)
    reason = _mlp_reason(self, hidden_states, per_token_scale)
    if reason is not None:
        fallback("swiglu", reason)
        return fl_patch.original(MLP_FORWARD)(self, hidden_states, per_token_scale, **kwargs)
    intermediate, bias = apply_module(self.linear_fc1)(hidden_states)
    casting = None
    if getattr(self.config, "fp8", None):  # both linears in fp8: the SwiGLU kernels make their casts (fp8_swiglu.py)
        from .fp8_swiglu import swiglu_casting

        casting = swiglu_casting(self, intermediate, bias)
    intermediate = ops.swiglu(intermediate, bias) if casting is None else casting
    return apply_module(self.linear_fc2)(intermediate)


def bias_swiglu_impl(
    input: torch.Tensor,
    bias: torch.Tensor | None,
    fp8_input_store: bool = False,
    cpu_offload_input: bool = False,
    *args: Any,
    **kwargs: Any,
) -> torch.Tensor:
    """``bias_swiglu_impl`` on the pack's SwiGLU kernel.

    Parameters of later releases (main's ``clamp_value``) arrive in ``args``/``kwargs`` and go
    to upstream as passed; any set to a value the kernel does not implement falls back.
    """
    later = later_parameters_reason(("clamp_value",), args, kwargs)
    if fp8_input_store:
        reason: str | None = "fp8_input_store"
    elif cpu_offload_input:
        reason = "cpu_offload_input"
    elif later is not None:
        reason = later
    elif input.dtype not in _DTYPES:
        reason = f"dtype {input.dtype}"
    elif bias is not None and bias.dtype != input.dtype:
        reason = f"input {input.dtype} with bias {bias.dtype}"
    else:
        reason = kernel_unavailable(input, bias)
    if reason is not None:
        fallback("swiglu", reason)
        return fl_patch.original(SWIGLU_IMPL)(input, bias, fp8_input_store, cpu_offload_input, *args, **kwargs)
    return ops.swiglu(input, bias)
