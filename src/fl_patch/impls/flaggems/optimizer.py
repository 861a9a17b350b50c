"""Megatron-core's optimizer step without Apex or TE: one fused Adam kernel, and multi-tensor norm, scale and copy.

Why: with neither Transformer Engine nor Apex, megatron-core 0.19.2
(``megatron/core/optimizer/__init__.py``) sets ``USING_PYTORCH_OPTIMIZER = True`` and
builds ``torch.optim.AdamW`` (or ``Adam``) with torch's default implementation: the
``foreach`` kernels, a dozen launches per group of tensors and several passes over
the fp32 parameters and both moments (measured for 1.32 B parameters on an H200:
25.7 ms a step, against 10.7 ms for torch's own ``fused=True`` kernel). The same
fallback replaces Apex's multi-tensor kernels with ``megatron.core.utils``'
``local_multi_tensor_l2_norm`` (one ``torch.norm`` per gradient, then
``torch.tensor`` of that list: one host synchronisation per tensor, a few hundred a
step) and ``local_multi_tensor_scale`` (``dst.copy_(src * scale)`` per tensor: an fp32
temporary for every tensor, also when copying the fp32 main parameters into the
bf16 model parameters, where ``scale`` is 1).

How: four patches, each a drop-in for what Apex/TE would have supplied.
- ``optimizer.USING_PYTORCH_OPTIMIZER`` becomes False and ``optimizer.Adam`` (torch's
  ``AdamW`` in the fallback) becomes ``FusedAdam``: a ``torch.optim.AdamW`` subclass
  taking Apex's ``adam_w_mode`` (decoupled weight decay, or L2 when False), the
  arguments megatron passes to Apex/TE's FusedAdam on that path, and running
  torch's ``fused=True`` kernel (one launch per parameter group and dtype) when every
  parameter is a floating tensor on a device torch has the fused kernel for;
  otherwise torch's default (said once). It is still a ``torch.optim.AdamW``, so the
  distributed optimizer's checks and its torch-format checkpoints are unchanged. Like
  Apex/TE's it takes ``lr=None`` (``OptimizerConfig``'s default: the scheduler sets it),
  and it gives Adam's per-parameter ``step`` to state megatron's ``init_state_fn`` made
  without one (the CPU pack's ``torch_optimizers`` explains both; its helpers are used).
- ``utils.local_multi_tensor_l2_norm``: ``torch._foreach_norm`` and one norm of the
  norms, on the device, no host synchronisation.
- ``utils.local_multi_tensor_scale``: ``torch._foreach_copy_`` when ``scale`` is 1 (the
  main-to-model parameter copy, fp32 to bf16 in one pass), ``torch._foreach_mul_`` in
  place (gradient clipping), else ``_foreach_mul`` then ``_foreach_copy_``.
Arithmetic: torch's fused Adam computes the same update as its foreach path; the
results differ by float rounding only (tests bound it).

Upstream reference: megatron-core 0.19.2 ``megatron/core/optimizer/__init__.py``
(``_get_megatron_optimizer_based_on_param_groups``), ``megatron/core/utils.py``
(``local_multi_tensor_l2_norm``, ``local_multi_tensor_scale``),
``megatron/core/optimizer/clip_grads.py``, ``megatron/core/optimizer/optimizer.py``
(``_multi_tensor_copy_this_to_that``).
When to drop: when megatron-core's torch fallback asks torch for its fused kernels
and its local multi-tensor functions stop synchronising per tensor.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from fl_patch.impls.without_te.torch_optimizers import (
    complete_adam_states,
    groups_without_lr,
    leave_lr_unset,
    require_learning_rates,
)

from ._runtime import LOG

__all__ = [
    "USING_PYTORCH_OPTIMIZER",
    "FusedAdam",
    "fused_possible",
    "local_multi_tensor_l2_norm",
    "local_multi_tensor_scale",
]

# megatron.core.optimizer reads this to pass Apex's ``adam_w_mode`` to ``Adam`` (FusedAdam below).
USING_PYTORCH_OPTIMIZER = False
_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        LOG.warning("fl_patch flaggems: %s (logged once)", message)


def fused_possible(params: Iterable[torch.Tensor]) -> str | None:
    """None if torch's fused Adam takes every tensor of ``params``, else why not."""
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    devices = set(_get_fused_kernels_supported_devices())
    for p in params:
        if not torch.is_floating_point(p):
            return f"a parameter of dtype {p.dtype}"
        if p.device.type not in devices:
            return f"a parameter on {p.device.type} (torch has no fused Adam there)"
    return None


def _all_params(params: Iterable[Any]) -> list[torch.Tensor]:  # a tensor, or tensors and param groups
    groups = list(params) if not isinstance(params, torch.Tensor) else [params]
    out: list[torch.Tensor] = []
    for group in groups:
        if isinstance(group, dict):
            out += list(group["params"]) if not isinstance(group["params"], torch.Tensor) else [group["params"]]
        else:
            out.append(group)
    return out


class FusedAdam(torch.optim.AdamW):
    """Apex/TE FusedAdam's constructor over torch's ``fused=True`` Adam (AdamW when ``adam_w_mode``)."""

    def __init__(
        self,
        params: Iterable[Any],  # a tensor, or tensors and param groups (as torch.optim takes)
        lr: float | None = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        bias_correction: bool = True,
        adam_w_mode: bool = True,
        capturable: bool = False,
        fused: bool | None = None,
        **unsupported: object,
    ) -> None:
        # Positional order: torch's AdamW (the name it replaces); Apex's own arguments by keyword,
        # as megatron passes every argument (``adam_cls(**kwargs)``).
        if unsupported:
            raise TypeError(
                f"fl_patch flaggems FusedAdam (torch's fused Adam) has no {sorted(unsupported)}: "
                "megatron asks for them with use_precision_aware_optimizer, which needs Transformer Engine"
            )
        if not bias_correction:
            raise ValueError("fl_patch flaggems FusedAdam: bias_correction=False is not supported by torch's Adam")
        params = list(params) if not isinstance(params, torch.Tensor) else [params]
        params, lacks_lr = groups_without_lr(params)
        reason = fused_possible(_all_params(params))
        if reason is not None:
            _say_once(f"Adam runs torch's default (foreach) kernels: {reason}")
        use_fused = reason is None if fused is None else (fused and reason is None)
        self._adam_w_mode = adam_w_mode
        # torch.optim.Adam's constructor, with the weight-decay mode asked for (AdamW's always decouples)
        torch.optim.Adam.__init__(
            self, params, lr=0.0 if lr is None else lr, betas=betas, eps=eps, weight_decay=weight_decay,
            amsgrad=amsgrad, capturable=capturable, fused=use_fused or None, decoupled_weight_decay=adam_w_mode,
        )  # fmt: skip
        if lr is None:  # OptimizerConfig's default: the scheduler sets it, as Apex/TE's FusedAdam allow
            leave_lr_unset(self, lacks_lr)

    def step(self, closure: Any = None) -> Any:
        """torch's step, after a clear error if a group has no lr yet and Adam's step where init_state_fn left none."""
        require_learning_rates(self)
        complete_adam_states(self)
        return super().step(closure)

    def state_dict(self) -> dict[str, Any]:
        """torch's state dict, with Adam's step where megatron's init_state_fn left none."""
        complete_adam_states(self)
        return super().state_dict()

    def __setstate__(self, state: dict) -> None:
        # AdamW's __setstate__ (also run by load_state_dict) forces decoupled weight decay; keep the mode chosen
        torch.optim.Adam.__setstate__(self, state)
        mode = getattr(self, "_adam_w_mode", True)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = mode


def local_multi_tensor_l2_norm(
    chunk_size: int, noop_flag: torch.Tensor, tensor_lists: list[list[torch.Tensor]], per_tensor: bool, *args: object
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """amp_C.multi_tensor_l2norm's result (the L2 norm of all tensors, fp32, shape [1]) on the device, no sync."""
    tensors = [t for tensor_list in tensor_lists for t in tensor_list]
    if not tensors:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return torch.zeros(1, dtype=torch.float, device=device), None
    # fp32 norms whatever the storage dtype (megatron hands fp32 main gradients)
    norms = torch._foreach_norm(tensors, 2, dtype=torch.float32)
    stacked = torch.stack([n.to(tensors[0].device) for n in norms])
    total = torch.linalg.vector_norm(stacked)
    per = stacked if per_tensor else None
    return total.reshape(1), per


def local_multi_tensor_scale(
    chunk_size: int, noop_flag: torch.Tensor, tensor_lists: list[list[torch.Tensor]], scale: float
) -> None:
    """amp_C.multi_tensor_scale: dst = src * scale for every pair (src and dst may be the same tensors)."""
    src, dst = tensor_lists[0], tensor_lists[1]
    if not src:
        return
    if len(src) != len(dst):
        raise ValueError(f"multi_tensor_scale: {len(src)} sources for {len(dst)} destinations")
    if scale == 1.0:
        pairs = [(s, d) for s, d in zip(src, dst, strict=True) if s is not d]
        if pairs:
            torch._foreach_copy_([d for _, d in pairs], [s for s, _ in pairs])
        return
    if all(s is d for s, d in zip(src, dst, strict=True)):
        torch._foreach_mul_(dst, scale)
        return
    torch._foreach_copy_(dst, torch._foreach_mul(src, scale))
