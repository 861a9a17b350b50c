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

from ._compat import warn_if_unverified

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


# --------------------------------------------------------------------------- distributed optimizer checkpoints
# Without Apex or Transformer Engine (always the case on a CPU: both need CUDA) the
# distributed optimizer wraps torch's own Adam, whose per-parameter state carries "step";
# three spots of upstream's checkpoint code get that case wrong. These are upstream bugs,
# not CPU problems: any machine without Apex/TE hits them (not checked on a GPU). They are
# also what `pretrain_gpt.py --use-distributed-optimizer --load` needs
# (tests/test_training_pack.py; docs/training_pack.md).

_DISTRIBUTED_STATE_DICT = "megatron.core.optimizer.distrib_optimizer.DistributedOptimizer.state_dict"
_DISTRIBUTED_LOAD_STATE_DICT = "megatron.core.optimizer.distrib_optimizer.DistributedOptimizer.load_state_dict"
_DISTRIBUTED_SET_STATES = (
    "megatron.core.optimizer.distrib_optimizer.DistributedOptimizer._set_main_param_and_optimizer_states"
)


def _uses_torch_optimizer() -> bool:
    from megatron.core.optimizer import distrib_optimizer

    return not distrib_optimizer.HAVE_APEX_OR_TE


def distributed_optimizer_state_dict(self: Any) -> dict[str, Any]:
    """Patch for ``optimizer.distrib_optimizer.DistributedOptimizer.state_dict``.

    Why: without Apex/TE, upstream (``distrib_optimizer.py``, ``state_dict``, lines 836-840)
    reads the iteration from torch Adam's per-parameter state:
    ``steps = list(set([s["step"].item() for s in inner_state_dict["state"].values()]));
    assert len(steps) == 1``. Before the first step that state is empty, and loading a
    checkpoint calls ``sharded_state_dict(..., is_loading=True)``, which calls
    ``self.load_state_dict(self.state_dict())`` on exactly such a fresh optimizer: the
    assertion fails and a distributed-optimizer run cannot resume.
    How: when the torch optimizer has no state yet, upstream runs with a ``step`` of 0 for
    each parameter present for the duration of the call (0 steps taken is the truth), then
    the state is emptied again; otherwise upstream runs untouched. A torch optimizer with no
    parameter at all on this rank (MoE experts on other pipeline stages: the expert
    optimizer is empty; Megatron-LM's ``test_optimizer_common_state_dict`` at 4 ranks) gets
    the state dict upstream's TE branch writes for it, ``step`` None
    (:func:`_state_dict_without_parameters`).
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/distrib_optimizer.py``.
    Drop when: upstream handles an optimizer without state (``len(steps) == 0``).
    """
    upstream = fl_patch.original(_DISTRIBUTED_STATE_DICT)
    inner = self.optimizer
    if not _uses_torch_optimizer() or len(inner.state) > 0:
        return upstream(self)
    params = _params_of(inner)
    if not params:
        return _state_dict_without_parameters(self)
    try:
        for param in params:
            inner.state[param] = {"step": torch.tensor(0.0)}
        return upstream(self)
    finally:
        for param in params:
            inner.state.pop(param, None)


def _state_dict_without_parameters(self: Any) -> dict[str, Any]:
    """Upstream's ``state_dict`` for a torch optimizer that holds no parameter on this rank.

    (An MoE model whose experts are on other pipeline stages gives this rank an empty expert
    optimizer.) Upstream asserts one step among zero parameters; TE's branch of the same method
    writes ``step = None`` for such a rank, and so does this: there is no step to record.
    """
    inner_state_dict = self.optimizer.state_dict()
    optimizer = {k: v for k, v in inner_state_dict.items() if k != "state"}
    for param_group in optimizer["param_groups"]:
        del param_group["params"]
        param_group["step"] = None
    state_dict: dict[str, Any] = {"optimizer": optimizer}
    if self.grad_scaler:
        state_dict["grad_scaler"] = self.grad_scaler.state_dict()
    return state_dict


def _fill_missing_steps(self: Any, state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` with a concrete step where a rank without parameters wrote ``None``."""
    groups = state_dict.get("optimizer", {}).get("param_groups", [])
    if not any(group.get("step", 0) is None for group in groups):
        return state_dict
    known = {float(group["step"]) for group in groups if group.get("step") is not None}
    if len(known) == 1:
        step = known.pop()
    else:
        current = {float(s["step"]) for s in self.optimizer.state.values() if "step" in s}
        step = current.pop() if len(current) == 1 else 0.0
        if _params_of(self.optimizer):
            LOG.warning(
                "fl_patch CPU pack: DistributedOptimizer.load_state_dict: the checkpoint has no Adam step for "
                "this optimizer (it was written by a rank that held none of its parameters, e.g. MoE experts on "
                "other pipeline stages); continuing from step %s of this optimizer",
                int(step),
            )
    optimizer = {**state_dict["optimizer"], "param_groups": [{**g, "step": step} for g in groups]}
    return {**state_dict, "optimizer": optimizer}


def distributed_optimizer_load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
    """Patch for ``optimizer.distrib_optimizer.DistributedOptimizer.load_state_dict``.

    Why: without Apex/TE, upstream (``distrib_optimizer.py``, ``load_state_dict``, lines
    1025-1031) builds one ``step = torch.tensor(steps[0])`` and puts that same tensor object
    into every parameter's state (``s["step"] = step``). torch's Adam increments each
    parameter's ``step`` in place, so after a resume the shared counter grows by the number
    of parameters per iteration, and Adam's bias correction (which depends on it) is wrong
    from the first resumed step on: the resumed run silently trains differently.
    How: after upstream has loaded everything, each parameter whose ``step`` is shared gets
    its own copy of the same value. A checkpoint whose param groups carry ``step`` None
    (written by a rank without parameters, above), which upstream would turn into
    ``torch.tensor(None)``, loads with the step of its other groups, else this optimizer's
    own, said in a warning where this optimizer holds parameters (:func:`_fill_missing_steps`).
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/distrib_optimizer.py``.
    Drop when: upstream gives each parameter its own step tensor.
    """
    if _uses_torch_optimizer():
        state_dict = _fill_missing_steps(self, state_dict)
    fl_patch.original(_DISTRIBUTED_LOAD_STATE_DICT)(self, state_dict)
    seen: set[int] = set()
    for state in self.optimizer.state.values():
        step = state.get("step")
        if isinstance(step, torch.Tensor):
            if id(step) in seen:
                state["step"] = step.clone()
            seen.add(id(step))


def distributed_optimizer_set_states(self: Any, model_param: torch.Tensor, tensors: dict[str, Any]) -> None:
    """Patch for ``optimizer.distrib_optimizer.DistributedOptimizer._set_main_param_and_optimizer_states``.

    Why: three problems in upstream (``distrib_optimizer.py``, lines 1216-1225), which copies
    every tensor of torch Adam's per-parameter state from the loaded ``tensors``:

    - ``step`` is among them, but the ``dp_reshardable`` checkpoint does not store it per
      parameter (lines 1953-1956: a ``LocalNonpersistentObject`` of the *current* state, "handled
      separately via param_groups"). So the copy overwrites the step that
      ``load_state_dict`` just restored from the checkpoint's param groups with the fresh
      optimizer's template (0): Adam's bias correction restarts and the resumed run trains
      differently from the original.
    - for fp32 parameters the main parameter shard is a view of the model parameter
      (``model_param.view(-1)[start:end]``, line 467), a leaf that requires grad; the
      ``copy_`` outside ``torch.no_grad()`` raises ("a view of a leaf Variable that requires
      grad is being used in an in-place operation"): fp32 runs cannot load at all.

    - the ``fully_reshardable`` checkpoint's ``tensors`` hold no ``step`` at all, while upstream's loop
      reads ``tensors[key]`` for every tensor of the parameter's state: torch's Adam keeps a
      ``step`` tensor there (TE's and Apex's keep it in the param groups), so the load stopped with
      ``KeyError: 'step'`` (Megatron-LM's ``test_chained_optimizer_resharding`` at 4 ranks).

    How: runs upstream under ``torch.no_grad()`` with ``step`` handed over as a non-tensor, whether
    the checkpoint had one or not, which upstream's loop skips, so the restored step stays
    (upstream's own ``load_parameter_state_from_fs_model_space`` skips ``step`` the same way).
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/distrib_optimizer.py``.
    Drop when: upstream skips ``step`` here and copies under ``torch.no_grad()``.
    """
    tensors = {**tensors, "step": None}
    with torch.no_grad():
        fl_patch.original(_DISTRIBUTED_SET_STATES)(self, model_param, tensors)


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
