"""megatron-core optimizer code that identifies tensors by their CUDA type name.

Upstream recognises fp32/fp16/bf16 parameters and gradients by comparing
``tensor.type()`` with ``'torch.cuda.FloatTensor'`` / ``'torch.cuda.HalfTensor'`` /
``'torch.cuda.BFloat16Tensor'``. A CPU tensor answers ``'torch.FloatTensor'``: the
optimizer refuses the model (``TypeError: Wrapped parameters must be one of
torch.cuda.FloatTensor, ...``) or gradient clipping asserts.

These impls call the upstream function unchanged, while :func:`cuda_type_names` makes the
CPU tensors involved answer ``tensor.type()`` with the CUDA name of the same dtype — only
those tensor objects, only for the duration of the call (an instance attribute that
shadows ``Tensor.type``, removed afterwards; ``torch.Tensor`` itself is never touched).
The branch upstream then takes is the one it takes on a GPU for the same dtype.

Upstream: megatron-core 0.19.2, ``megatron/core/optimizer/{optimizer,distrib_optimizer,
clip_grads,grad_scaler}.py``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

import fl_patch
from fl_patch.impls._compat import warn_if_unverified

__all__ = [
    "clip_grad_by_total_norm_fp32",
    "cuda_type_names",
    "distributed_optimizer_init",
    "dynamic_grad_scaler_load_state_dict",
    "float16_optimizer_init",
    "hybrid_optimizer_param_groups",
]

warn_if_unverified()

LOG = logging.getLogger("fl_patch.cpu")

_FLOAT16_INIT = "megatron.core.optimizer.optimizer.Float16OptimizerWithFloat16Params.__init__"
_DISTRIBUTED_INIT = "megatron.core.optimizer.distrib_optimizer.DistributedOptimizer.__init__"
_CLIP = "megatron.core.optimizer.clip_grads.clip_grad_by_total_norm_fp32"


def _cuda_type_name(tensor: torch.Tensor) -> Callable[..., Any]:
    def type(*args: Any, **kwargs: Any) -> Any:
        if args or kwargs:  # a conversion, tensor.type(dtype): the real method
            return torch.Tensor.type(tensor, *args, **kwargs)
        name = torch.Tensor.type(tensor)
        return name.replace("torch.", "torch.cuda.", 1) if name.startswith("torch.") and tensor.is_cpu else name

    return type


@contextlib.contextmanager
def cuda_type_names(tensors: Iterable[torch.Tensor | None]) -> Iterator[None]:
    """While active, each CPU tensor's ``type()`` gives the CUDA type name of its dtype."""
    shadowed: list[tuple[torch.Tensor, Callable[..., Any]]] = []
    try:
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.is_cpu and "type" not in vars(tensor):
                override = _cuda_type_name(tensor)
                tensor.type = override  # type: ignore[method-assign]
                shadowed.append((tensor, override))
        yield
    finally:
        for tensor, override in shadowed:
            if vars(tensor).get("type") is override:
                del tensor.type


def _params_of(optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    if optimizer is None:
        return []
    return [param for group in optimizer.param_groups for param in group["params"]]


def float16_optimizer_init(self: Any, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
    """Patch for ``optimizer.optimizer.Float16OptimizerWithFloat16Params.__init__``.

    Why: upstream (``optimizer.py``, ``Float16OptimizerWithFloat16Params.__init__``) sorts
    each parameter with ``param.type() in ['torch.cuda.HalfTensor',
    'torch.cuda.BFloat16Tensor']`` / ``param.type() == 'torch.cuda.FloatTensor'`` and raises
    ``TypeError`` for anything else, so with bf16/fp16 on a CPU ``get_megatron_optimizer``
    fails.
    How: runs upstream's ``__init__`` with the optimizer's parameters answering the CUDA
    type name of their dtype (:func:`cuda_type_names`); fp16/bf16 parameters get their fp32
    main copies exactly as on a GPU.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/optimizer.py``.
    Drop when: upstream tests ``param.dtype`` instead of the CUDA type string.
    """
    upstream = fl_patch.original(_FLOAT16_INIT)
    with cuda_type_names(_params_of(optimizer)):
        upstream(self, optimizer, *args, **kwargs)


def distributed_optimizer_init(self: Any, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
    """Patch for ``optimizer.distrib_optimizer.DistributedOptimizer.__init__``.

    Why: upstream (``distrib_optimizer.py``, ``DistributedOptimizer.__init__`` and the
    classmethod ``_build_model_and_main_param_groups`` it calls) sorts parameters with
    ``param.type()`` against ``'torch.cuda.HalfTensor'`` / ``'torch.cuda.BFloat16Tensor'``
    / ``'torch.cuda.FloatTensor'`` and raises ``TypeError`` otherwise: the distributed
    optimizer cannot be built on a CPU, at any precision.
    How: runs upstream's ``__init__`` with the model parameters (those of the torch
    optimizer it wraps) answering the CUDA type name of their dtype (:func:`cuda_type_names`).
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/distrib_optimizer.py``.
    Drop when: upstream tests ``param.dtype`` instead of the CUDA type string.
    """
    upstream = fl_patch.original(_DISTRIBUTED_INIT)
    with cuda_type_names(_params_of(optimizer)):
        upstream(self, optimizer, *args, **kwargs)


def clip_grad_by_total_norm_fp32(
    parameters: list[torch.Tensor] | torch.Tensor,
    max_norm: float,
    total_norm: float,
    use_decoupled_grad: bool = False,
) -> None:
    """Patch for ``optimizer.clip_grads.clip_grad_by_total_norm_fp32``.

    Why: upstream (``clip_grads.py``, ``clip_grad_by_total_norm_fp32``) asserts
    ``param.grad.type() == 'torch.cuda.FloatTensor'`` for every gradient, so gradient
    clipping (``clip_grad > 0``, on by default in ``OptimizerConfig``) fails on a CPU.
    The name is also imported into ``optimizer.optimizer``; fl_patch rebinds it there.
    How: runs upstream with the gradients answering the CUDA type name of their dtype
    (:func:`cuda_type_names`): an fp32 CPU gradient passes, a non-fp32 one still fails the
    assertion as it would on a GPU. The scaling itself is upstream's (``torch.zeros(...,
    device='cuda')`` there goes through the module's CPU view of torch).
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/clip_grads.py``.
    Drop when: upstream checks ``param.grad.dtype == torch.float32``.
    """
    upstream = fl_patch.original(_CLIP)
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [] if use_decoupled_grad else [param.grad for param in params]
    with cuda_type_names(grads):
        upstream(params, max_norm, total_norm, use_decoupled_grad)


def dynamic_grad_scaler_load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
    """Patch for ``optimizer.grad_scaler.DynamicGradScaler.load_state_dict``.

    Why: upstream (``grad_scaler.py``, ``DynamicGradScaler.load_state_dict``) does
    ``state_dict['scale'].cuda(torch.cuda.current_device())``: a Tensor method, which no
    view of the module's ``torch`` can redirect; on a CPU, resuming an fp16 run from a
    checkpoint fails there.
    How: the same three assignments, with the scale moved to the CPU (where the scaler's
    other tensors live) instead of to a CUDA device. (The pack's ``torch.Tensor.cuda``
    patch, ``training_functions.tensor_cuda``, now reaches upstream's ``.cuda(...)`` too;
    this one stays so that the line is fixed where it is, whichever is disabled.)
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/grad_scaler.py``.
    Drop when: upstream moves the scale with ``.to(self._scale.device)`` or similar.
    """
    self._scale = state_dict["scale"].to(device="cpu")
    self._growth_tracker = state_dict["growth_tracker"]
    self._hysteresis_tracker = state_dict["hysteresis_tracker"]


def hybrid_optimizer_param_groups(self: Any, offload_fraction: float) -> tuple[Any, ...]:
    """Patch for ``HybridDeviceOptimizer._get_sub_optimizer_param_groups`` (``--optimizer-cpu-offload``).

    Why: upstream splits the parameters by ``param.is_cuda``: the device's ones are offloaded (a host copy
    stepped by the CPU optimizer, copied back after) up to ``offload_fraction`` of their size, the rest
    stepped in place by the device optimizer. It assumes every host parameter is such a copy: one that was on
    the host already lands in a CPU optimizer with no device parameter behind it, and the first ``step()``
    fails with ``KeyError: Parameter containing: ...`` (``cpu_copys_map_gpu_param``). On a machine without a
    GPU every parameter is on the host (``is_cuda`` is False, truthfully), so no offloaded run can step.
    How: the same split with the host as the device: a parameter on the host or on CUDA counts toward the
    fraction and is either offloaded (a host copy, its original kept and refreshed after each step) or stepped
    in place; ``param_update_in_fp32`` keeps an fp32 master as upstream does. The tuple returned is upstream's
    (host groups, device groups, original -> copy, copy -> original, original -> fp32 master).
    Upstream reference: megatron-core 0.19.2,
    ``megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py`` (``_get_sub_optimizer_param_groups``,
    ``_set_sub_optimizer_grads``).
    Drop when: upstream splits by an explicit device choice rather than ``is_cuda``.
    """
    params = [param for group in self.param_groups for param in group["params"]]
    on_device = {id(param): param for param in params if param.is_cuda or param.device.type == "cpu"}
    threshold = sum(param.numel() for param in on_device.values()) * offload_fraction
    offloaded = 0
    host_groups: list[dict[str, Any]] = []
    device_groups: list[dict[str, Any]] = []
    copy_of: dict[torch.Tensor, torch.Tensor] = {}
    original_of: dict[torch.Tensor, torch.Tensor] = {}
    fp32_of: dict[torch.Tensor, torch.Tensor] = {}
    for group in self.param_groups:
        host_group = {**group, "params": []}
        device_group = {**group, "params": []}
        for original in group["params"]:
            inner = original
            offload = offloaded < threshold and id(original) in on_device
            if offload:
                inner = original.detach().clone().cpu()
                if self.pin_cpu_params and original.is_cuda:
                    inner = inner.pin_memory()  # (pinned memory exists for a device's copies only)
                offloaded += inner.numel()
            if self.param_update_in_fp32 and inner.dtype != torch.float32:
                inner = inner.detach().clone().float()
                fp32_of[original] = inner
            if offload:
                copy_of[original] = inner
                original_of[inner] = original
            (host_group if offload else device_group)["params"].append(inner)
        if host_group["params"]:
            host_groups.append(host_group)
        if device_group["params"]:
            device_groups.append(device_group)
    return host_groups, device_groups, copy_of, original_of, fp32_of
