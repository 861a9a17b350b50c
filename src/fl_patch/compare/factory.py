"""Factory classes: a ``__new__`` that returns a module of another class, compared through those modules.

megatron's ``WrappedTorchNorm(config, hidden_size, ...)`` returns a ``torch.nn.RMSNorm`` or
``LayerNorm``; TE's ``TENorm`` a TE norm. A vendor replaces the class to build its own module (the
FlagGems pack, ``examples/my_plugin``). Such a class has no method to compare on one instance: what
differs is the module it builds. So each module the impl's ``__new__`` builds is watched (a forward
pre-hook and a forward hook, taken off once the target's N calls are spent): on its forward, the
module upstream's ``__new__`` builds from the same arguments is made, given the impl module's
parameters and buffers (same names and shapes, else the target is "not compared" with both
lists), and run on copies of the same inputs; outputs and the gradients of inputs and parameters are
compared as for a method (``call.Comparison``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from fl_patch.compare.call import ACTIVE, Comparison, Sides
from fl_patch.compare.capture import RngState
from fl_patch.compare.results import TargetResult
from fl_patch.host.compiling import is_compiling_function

__all__ = ["new_wrapper"]


def new_wrapper(result: TargetResult, impl_new: Callable[..., Any], original: type, calls: int) -> Callable[..., Any]:
    """The ``__new__`` to install: the impl's, plus a watch on the module it returns."""
    comparison = Comparison(result, calls, "forward of the module it builds")
    is_compiling = is_compiling_function()

    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        made = impl_new(cls, *args, **kwargs)
        if is_compiling() or comparison.left <= 0 or ACTIVE.on:
            return made
        if isinstance(made, cls) or not isinstance(made, torch.nn.Module):
            return made  # an ordinary instance (its methods are compared), or not a module
        _watch(comparison, made, original, args, kwargs)
        return made

    new.__name__ = new.__qualname__ = "__new__"
    new.__doc__ = getattr(impl_new, "__doc__", None)
    new.__module__ = getattr(impl_new, "__module__", new.__module__)
    try:  # the impl's signature: fl_patch's fit checks of names rebound to this class read it
        new.__signature__ = inspect.signature(impl_new)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    return new


def _watch(comparison: Comparison, made: torch.nn.Module, original: type, args: Any, kwargs: Any) -> None:
    pending: list[tuple[int, Sides, Any]] = []
    handles: list[Any] = []

    def before(module: torch.nn.Module, inputs: tuple[Any, ...], named: dict[str, Any]) -> None:
        if ACTIVE.on:
            return
        call = comparison.take()
        if call is None:
            _release(handles)
            return
        upstream = _upstream_module(comparison.result, made, original, args, kwargs)
        if upstream is None:
            comparison.result.stopped = True
            _release(handles)
            return
        sides = Sides(made.forward, upstream.forward, made, upstream)
        pending.append((call, sides, comparison.prepare(sides, inputs, named)))

    def after(module: torch.nn.Module, inputs: tuple[Any, ...], named: dict[str, Any], output: Any) -> None:
        if not pending or ACTIVE.on:
            return
        call, sides, prepared = pending.pop()
        if prepared is not None:
            comparison.finish(call, sides, prepared, output)
        if comparison.left <= 0:
            _release(handles)

    handles.append(made.register_forward_pre_hook(before, with_kwargs=True))
    handles.append(made.register_forward_hook(after, with_kwargs=True))


def _release(handles: list[Any]) -> None:
    while handles:
        handles.pop().remove()


def _upstream_module(
    result: TargetResult, made: torch.nn.Module, original: type, args: Any, kwargs: Any
) -> torch.nn.Module | None:
    """The module upstream's ``__new__`` builds from the same arguments, holding copies of ``made``'s tensors."""
    saved = RngState()  # building may draw initial weights: the program's stream stays as it was
    ACTIVE.on = True
    try:
        upstream = original.__new__(original, *args, **kwargs)
    except Exception as exc:  # noqa: BLE001  (upstream's own constructor: a reason, never the program's error)
        result.note(f"upstream's __new__ raises here: {type(exc).__name__}: {exc}")
        return None
    finally:
        ACTIVE.on = False
        saved.restore()
    if not isinstance(upstream, torch.nn.Module):
        result.note(f"upstream's __new__ returns a {type(upstream).__name__}, not a module: nothing to compare")
        return None
    ours = {**dict(made.named_parameters()), **dict(made.named_buffers())}
    theirs = {**dict(upstream.named_parameters()), **dict(upstream.named_buffers())}
    if {k: tuple(v.shape) for k, v in ours.items()} != {k: tuple(v.shape) for k, v in theirs.items()}:
        result.note(
            f"the modules differ in their tensors: the impl's {sorted(ours)}, upstream's {sorted(theirs)}: not compared"
        )
        return None
    modules = dict(upstream.named_modules())
    with torch.no_grad():
        for name, tensor in ours.items():
            path, _, leaf = name.rpartition(".")
            owner = modules[path]
            copy = tensor.detach().clone()
            if leaf in owner._parameters:
                owner._parameters[leaf] = torch.nn.Parameter(copy, requires_grad=tensor.requires_grad)
            else:
                owner._buffers[leaf] = copy
    upstream.train(made.training)
    return upstream
