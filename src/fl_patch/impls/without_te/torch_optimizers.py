"""torch's Adam, AdamW and SGD as megatron-core's fallback uses them: the learning rate may come later.

Why: without Transformer Engine and Apex (always so on a CPU), megatron-core builds its
optimizer from torch's: ``adam_cls = torch.optim.AdamW if config.decoupled_weight_decay
else torch.optim.Adam`` and ``SGD`` bound to ``torch.optim.SGD``
(``megatron/core/optimizer/__init__.py`` lines 32-33, 557, 618), called with
``lr=config.lr``. ``OptimizerConfig.lr`` defaults to ``None``: the learning rate is
megatron's ``OptimizerParamScheduler``'s to set on each param group, and TE's/Apex's
fused optimizers accept ``None`` until then. torch's refuse it in ``__init__``
(``TypeError: '<=' not supported between instances of 'float' and 'NoneType'``): any
megatron-core program that leaves ``lr`` to the scheduler (21 of Megatron-LM's own
``dist_checkpointing/test_optimizer.py`` tests at 4 ranks) stops before its first step,
with an error that names neither the optimizer nor the cause.

How: subclasses of torch's three optimizers that accept ``lr=None`` the way the fused
ones do: the param groups that bring no learning rate of their own carry ``None`` until
someone sets one, and everything else is torch's. Unlike a silent placeholder (``0.0``
would make every step a no-op), a ``step()`` with a group still at ``None`` raises a
``ValueError`` that names the optimizer, the group and what sets it. An ``lr`` given is
passed through unchanged: with it these classes are torch's. They are subclasses, so
megatron's ``isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))``
(``distrib_optimizer.py`` lines 689, 844) holds.

A second mismatch of the same origin: megatron's ``init_state_fn`` for Adam (the same
file, line 590: called before a checkpoint is saved or loaded on an optimizer that has not
stepped) creates ``exp_avg`` and ``exp_avg_sq`` but no ``step``, which TE's FusedAdam keeps
in its param groups while torch's keeps it per parameter: torch's Adam then fails at its
next ``step()`` and megatron's own ``DistributedOptimizer.state_dict`` at ``s["step"]``
(``distrib_optimizer.py`` line 838), both with a bare ``KeyError: 'step'``. Here Adam's
invariant, a parameter with state has a ``step``, is restored where torch or megatron reads
it (``step()``, ``state_dict()``): a state without one gets torch's own zero step (the
optimizer has not stepped for it), on the device torch would put it.

Installed as ``torch.optim`` of the CPU view of torch that megatron's optimizer package
sees (``torch_names.OPTIMIZER_PACKAGE``) and as its fallback name ``SGD``.

Upstream reference: megatron-core 0.17.1-0.20 (main), ``megatron/core/optimizer/__init__.py``.
Drop when: upstream passes a concrete learning rate to torch's optimizers, or torch accepts
``lr=None``.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any

import torch

from fl_patch.impls._compat import warn_if_unverified

__all__ = [
    "OPTIM",
    "SGD",
    "Adam",
    "AdamW",
    "complete_adam_states",
    "groups_without_lr",
    "leave_lr_unset",
    "require_learning_rates",
]

warn_if_unverified()

_PLACEHOLDER = 0.0  # only for torch's own check in __init__; replaced by None before anyone sees it
_NOT_GIVEN: Any = object()  # no lr argument at all: torch's own default applies


def groups_without_lr(params: Any) -> tuple[list[Any], list[bool]]:
    """The params as a list (a generator is read once), and for each group whether it lacks ``lr``."""
    listed = list(params)
    if listed and isinstance(listed[0], dict):
        return listed, ["lr" not in group for group in listed]
    return listed, [True]


def leave_lr_unset(optimizer: torch.optim.Optimizer, lacks_lr: list[bool]) -> None:
    """After torch's ``__init__`` ran with a placeholder lr: ``None`` again where no lr was given."""
    optimizer.defaults["lr"] = None
    for group, lacks in zip(optimizer.param_groups, lacks_lr, strict=True):
        if lacks:
            group["lr"] = None


def require_learning_rates(optimizer: torch.optim.Optimizer) -> None:
    """Raise a ``ValueError`` naming the first param group whose learning rate is still ``None``."""
    for index, group in enumerate(optimizer.param_groups):
        if group.get("lr") is None:
            raise ValueError(
                f"{type(optimizer).__name__}.step(): param group {index} has no learning rate "
                "(lr is None). megatron-core's OptimizerConfig.lr defaults to None and leaves the "
                "learning rate to megatron's OptimizerParamScheduler (its step() sets each group's "
                "'lr'); set OptimizerConfig.lr, or step the scheduler before the optimizer. "
                "(fl_patch CPU pack: fl_patch/impls/cpu/torch_optimizers.py)"
            )


def complete_adam_states(optimizer: torch.optim.Optimizer) -> None:
    """Give each parameter whose Adam state has no ``step`` torch's own zero step (see the module doc)."""
    for group in optimizer.param_groups:
        on_device = bool(group.get("capturable") or group.get("fused"))
        for param in group["params"]:
            state = optimizer.state.get(param)
            if state and "step" not in state:
                device = param.device if on_device else torch.device("cpu")
                state["step"] = torch.zeros((), dtype=torch.float32, device=device)


def _late_lr_init(base: Any) -> Callable[..., None]:  # Any: torch types Optimizer.__init__ as (params, defaults)
    def __init__(
        self: torch.optim.Optimizer, params: Iterable[Any], lr: Any = _NOT_GIVEN, *args: Any, **kwargs: Any
    ) -> None:
        if lr is _NOT_GIVEN:
            base.__init__(self, params, *args, **kwargs)
            return
        if lr is not None:
            base.__init__(self, params, lr, *args, **kwargs)
            return
        listed, lacks_lr = groups_without_lr(params)
        base.__init__(self, listed, _PLACEHOLDER, *args, **kwargs)
        leave_lr_unset(self, lacks_lr)

    __init__.__qualname__ = f"{base.__name__}.__init__"
    return __init__


def _checked_step(base: type[torch.optim.Optimizer], adam: bool) -> Callable[..., Any]:
    def step(self: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        require_learning_rates(self)
        if adam:
            complete_adam_states(self)
        return base.step(self, closure)

    step.__qualname__ = f"{base.__name__}.step"
    return step


def _complete_state_dict(base: type[torch.optim.Optimizer]) -> Callable[..., dict[str, Any]]:
    def state_dict(self: torch.optim.Optimizer) -> dict[str, Any]:
        complete_adam_states(self)
        return base.state_dict(self)

    state_dict.__qualname__ = f"{base.__name__}.state_dict"
    return state_dict


def _accepting_late_lr(base: type[torch.optim.Optimizer], *, adam: bool) -> type[torch.optim.Optimizer]:
    namespace: dict[str, Any] = {
        "__init__": _late_lr_init(base),
        "step": _checked_step(base, adam),
        "__module__": __name__,
        "__doc__": f"``torch.optim.{base.__name__}`` that accepts ``lr=None`` until a scheduler sets it "
        "(as Transformer Engine's and Apex's fused optimizers do).",
    }
    if adam:
        namespace["state_dict"] = _complete_state_dict(base)
    return type(base.__name__, (base,), namespace)


Adam = _accepting_late_lr(torch.optim.Adam, adam=True)
AdamW = _accepting_late_lr(torch.optim.AdamW, adam=True)
SGD = _accepting_late_lr(torch.optim.SGD, adam=False)


class _OptimNamespace(types.ModuleType):
    """``torch.optim`` with :data:`Adam`, :data:`AdamW` and :data:`SGD` above; all else is torch's."""

    def __init__(self) -> None:
        super().__init__("torch.optim", torch.optim.__doc__)
        self.Adam = Adam
        self.AdamW = AdamW
        self.SGD = SGD

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.optim, name)

    def __repr__(self) -> str:
        return "<torch.optim whose Adam, AdamW and SGD accept lr=None (fl_patch CPU pack)>"


OPTIM = _OptimNamespace()
"""``torch.optim`` as megatron-core's optimizer package sees it on the CPU."""
