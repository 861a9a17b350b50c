"""The distributed optimizer's checkpoints with torch's Adam: megatron-core without Apex or Transformer Engine.

Without Apex or Transformer Engine (always the case on a CPU: both need CUDA; a GPU machine
without them too) the distributed optimizer wraps torch's own Adam, whose per-parameter state
carries "step" (TE's and Apex's fused Adam keep it in the param groups); three spots of
upstream's checkpoint code get that case wrong. These are upstream bugs, not CPU problems: the
CPU pack and the FlagGems pack both register these impls (the shared pack ``without_te``). They
are also what ``pretrain_gpt.py --use-distributed-optimizer --load`` needs
(``tests/impls/test_cpu_training.py``; ``docs/training_pack.md``). Each impl runs upstream untouched
where megatron uses Apex's or TE's optimizer (``distrib_optimizer.HAVE_APEX_OR_TE``).

Upstream: megatron-core 0.19.2, ``megatron/core/optimizer/distrib_optimizer.py``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

import fl_patch

__all__ = [
    "distributed_optimizer_load_state_dict",
    "distributed_optimizer_set_states",
    "distributed_optimizer_state_dict",
]

LOG = logging.getLogger("fl_patch.cpu")


def _params_of(optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    if optimizer is None:
        return []
    return [param for group in optimizer.param_groups for param in group["params"]]


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
