"""The engine's two compare hooks, for each replacement before it is installed.

- ``wrap_function`` (``core.patch.Wrap``: a function, method or static method): a plain function
  (never a wrapt proxy: ``torch.compile`` inlines a proxy's ``__code__`` and silently skips it),
  which on each call first asks ``torch.compiler.is_compiling()`` and, while tracing, only calls
  the impl; past the first N calls of the target it only calls the impl too (one attribute read
  more than the impl's own call). A method whose receiver is a ``torch.nn.Module`` is compared with
  the module's own parameters (gradients included) and clones of its buffers. The engine gives
  what comes back the face it gives any replacement (``core.patch``).
- ``wrap_class`` (a class target): each method the impl class overrides that upstream's class also
  has (``forward``, ``step``, ``__call__``; not ``__init__`` or other dunders) is compared against
  upstream's method called on the same instance, on a subclass of the impl that carries the
  wrappers: the engine redirects upstream's class to that subclass (``core.classes``), and the
  vendor's class is never changed. A factory class, whose ``__new__`` returns a module of another
  class (megatron's ``WrappedTorchNorm``, TE's ``TENorm``), is compared through the modules it
  builds: each one's ``forward`` against the module upstream's ``__new__`` builds from the same
  arguments, given the impl module's parameters and buffers (``factory.py``).
- whatever cannot be compared here (upstream's ``None``, a ``unittest.mock`` stand-in for a package
  that is not installed, a generator, a class method) comes back unchanged, with the reason recorded
  for the table.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

from fl_patch.compare.results import RESULTS, TargetResult
from fl_patch.core.missing import mock_stand_in
from fl_patch.core.resolve import Kind
from fl_patch.host.compiling import is_compiling_function

__all__ = ["configure", "wrap_class", "wrap_function"]

_CALLS = [0]  # the N of --compare, set by ``configure``


def configure(calls: int) -> None:
    _CALLS[0] = calls


def wrap_function(target: str, function: types.FunctionType, upstream: object, kind: Kind) -> types.FunctionType:
    """What to install for ``function`` (fl_patch's own, for ``target``) so its first N calls are compared."""
    if kind not in (Kind.FUNCTION, Kind.METHOD, Kind.STATICMETHOD):
        return function  # class methods: listed at exit from the engine's records
    result = RESULTS.get(target, kind.value)
    reason = _why_not(function, upstream, kind.value, target.rpartition(".")[2])
    if reason is not None:
        result.note(reason)
        return function
    return _function_wrapper(result, function, upstream, receiver=kind is Kind.METHOD)  # type: ignore[arg-type]


def wrap_class(target: str, impl: type, original: type) -> type:
    """The class ``original(...)`` builds in compare mode: ``impl``, or a subclass of it whose overrides are compared."""
    result = RESULTS.get(target, "class")
    reason = _why_not(impl, original, "class", target.rpartition(".")[2])
    if reason is not None:
        result.note(reason)
        return impl
    return _wrap_class(result, impl, original)


def _why_not(replacement: object, original: object, kind: str, name: str) -> str | None:
    if original is None:
        return "upstream has None here (an optional dependency is missing): nothing to compare with"
    if mock_stand_in(original):
        return "upstream is a unittest.mock stand-in here (needs a package that is not installed, such as TE)"
    if kind == "class":
        if not isinstance(replacement, type) or not isinstance(original, type):
            return "not a class on both sides"
        return None
    if kind == "staticmethod":
        replacement = getattr(replacement, "__func__", replacement)
        original = getattr(original, "__func__", original)
    if not isinstance(replacement, types.FunctionType):
        return f"the installed object is a {type(replacement).__name__}, not a plain function: not wrapped"
    if not callable(original):
        return f"upstream's object is a {type(original).__name__}: nothing to call"
    if inspect.isgeneratorfunction(replacement) or inspect.iscoroutinefunction(replacement):
        return "a generator or coroutine function: its result is produced later, not compared"
    if inspect.isasyncgenfunction(replacement):
        return "an async generator: not compared"
    if kind == "method" and name.startswith("__") and name not in ("__call__",):
        return f"{name}: it builds or changes the object, it computes nothing to compare"
    return None


def _function_wrapper(
    result: TargetResult, impl: types.FunctionType, original: Callable[..., Any], *, receiver: bool, label: str = ""
) -> types.FunctionType:
    from fl_patch.compare import call  # (imports torch: only here, when a patch is being installed)

    comparison = call.Comparison(result, _CALLS[0], label)
    is_compiling = is_compiling_function()
    active = call.ACTIVE
    run = call.run

    def compared(*args: Any, **kwargs: Any) -> Any:
        if is_compiling() or comparison.left <= 0 or active.on:
            return impl(*args, **kwargs)
        return run(comparison, impl, original, receiver, args, kwargs)

    if not label:
        # (the engine gives it upstream's face; a class's method wrapper is named here, like the impl's)
        return compared  # type: ignore[return-value]  # a def: a FunctionType
    functools.update_wrapper(compared, impl, updated=())
    del compared.__wrapped__  # type: ignore[attr-defined]  # set by update_wrapper: it is not the impl's face
    return compared  # type: ignore[return-value]


def _overridden(impl: type, original: type) -> dict[str, tuple[types.FunctionType, types.FunctionType]]:
    """Methods the impl's own classes define (before ``original`` in its MRO) that upstream's class has too."""
    upstream_classes = set(original.__mro__)
    found: dict[str, tuple[types.FunctionType, types.FunctionType]] = {}
    for klass in impl.__mro__:
        if klass in upstream_classes:
            break
        for name, value in vars(klass).items():
            if name in found or (name.startswith("__") and name != "__call__"):
                continue
            upstream = inspect.getattr_static(original, name, None)
            if (
                isinstance(value, types.FunctionType)
                and isinstance(upstream, types.FunctionType)
                and value is not upstream
            ):
                if not (inspect.isgeneratorfunction(value) or inspect.iscoroutinefunction(value)):
                    found[name] = (value, upstream)
    return found


def _wrap_class(result: TargetResult, impl: type, original: type) -> type:
    wrappers: dict[str, object] = {}
    for name, (ours, theirs) in _overridden(impl, original).items():
        wrappers[name] = _function_wrapper(result, ours, theirs, receiver=True, label=name)
    new = inspect.getattr_static(impl, "__new__", None)
    if isinstance(new, staticmethod) and new is not inspect.getattr_static(original, "__new__", None):
        from fl_patch.compare import factory

        wrappers["__new__"] = staticmethod(factory.new_wrapper(result, new.__func__, original, _CALLS[0]))
    if not wrappers:
        result.note("the impl class overrides no method upstream's class has (only constructors or new methods)")
        return impl
    namespace: dict[str, object] = {"__module__": impl.__module__, "__qualname__": impl.__qualname__}
    namespace.update(wrappers, __doc__=impl.__doc__, __slots__=())  # instances laid out as the impl's
    return type(impl)(impl.__name__, (impl,), namespace)
