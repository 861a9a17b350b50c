"""``wrap_for_compare``: the one hook the engine calls, for each replacement before it is installed.

What comes back is installed in the replacement's place:

- **a function or method** (``kind`` "function", "method", "staticmethod"): a plain function made with
  ``functools.wraps(impl, updated=())`` (never a wrapt proxy: ``torch.compile`` inlines a proxy's
  ``__code__`` and silently skips it), which on each call first asks ``torch.compiler.is_compiling()``
  and, while tracing, only calls the impl; past the first N calls of the target it only calls the impl
  too (one attribute read more than the impl's own call). A method whose receiver is a
  ``torch.nn.Module`` is compared with the module's own parameters (gradients included) and clones of
  its buffers.
- **a class** (``kind`` "class"): each method the impl class overrides that upstream's class also has
  (``forward``, ``step``, ``__call__``; not ``__init__`` or other dunders) is compared against
  upstream's method called on the same instance. Today's engine installs fl_patch's own stand-in class
  (``core.kinds.stand_in_class``): the compare wrappers are set on it, nothing of the vendor's class is
  changed. Given the impl class itself (an engine that redirects instantiation to it), a subclass of it
  carrying the wrappers comes back instead. A factory class, whose ``__new__`` returns a module of
  another class (megatron's ``WrappedTorchNorm``, TE's ``TENorm``), is compared through the modules it
  builds: each one's ``forward`` against the module upstream's ``__new__`` builds from the same
  arguments, given the impl module's parameters and buffers (``factory.py``).
- **anything else**, and whatever cannot be compared here (upstream's ``None``, a ``unittest.mock``
  stand-in for a package that is not installed, a generator, a class method): the replacement itself,
  with the reason recorded for the table.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

from fl_patch.compare.results import RESULTS, TargetResult
from fl_patch.core.apply import stands_for
from fl_patch.core.kinds import ORIGINAL_ATTR, is_stand_in
from fl_patch.core.missing import mock_stand_in

__all__ = ["configure", "wrap_for_compare"]

_CALLS = [0]  # the N of --compare, set by ``configure``


def configure(calls: int) -> None:
    _CALLS[0] = calls


def wrap_for_compare(target: str, replacement: object, original: object, kind: str) -> object:
    """What to install for ``replacement`` (the engine's object for ``target``) so its first N calls are compared."""
    if kind not in ("function", "method", "staticmethod", "class"):
        return replacement  # attributes, modules, properties, class methods: listed at exit from the engine's records
    if kind == "class" and is_stand_in(original):
        # A name bound to another target's class (an alias, rebound by the engine): compare with upstream's class.
        original = vars(original)[ORIGINAL_ATTR]
    result = RESULTS.get(target, kind)
    reason = _why_not(replacement, original, kind, target.rpartition(".")[2])
    if reason is not None:
        result.note(reason)
        return replacement
    if kind == "class":
        return _wrap_class(result, replacement, original)  # type: ignore[arg-type]  # _why_not checked both are classes
    if kind == "staticmethod":
        return staticmethod(_function_wrapper(result, replacement.__func__, original.__func__, receiver=False))  # type: ignore[attr-defined]
    return _function_wrapper(result, replacement, original, receiver=kind == "method")  # type: ignore[arg-type]


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


def is_compiling_function() -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` (dynamo reads it as a constant while tracing), or one that finds it later."""
    torch = sys.modules.get("torch")
    compiler = getattr(torch, "compiler", None)
    found = getattr(compiler, "is_compiling", None)
    if callable(found):
        return found

    def later() -> bool:
        compiler = getattr(sys.modules.get("torch"), "compiler", None)
        check = getattr(compiler, "is_compiling", None)
        return bool(check()) if callable(check) else False

    return later


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

    functools.update_wrapper(compared, impl, updated=())
    # Not the impl: the installed object's __wrapped__ is the upstream original (``core.apply``), which
    # impls written for FlagScale call; pointing it at the impl would make them recurse (as report mode).
    del compared.__wrapped__  # type: ignore[attr-defined]  # set by update_wrapper just above
    try:
        compared.__signature__ = inspect.signature(impl)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    wrapper: types.FunctionType = compared  # type: ignore[assignment]  # a def: a FunctionType
    stands_for(wrapper, impl)  # the impl gets the marks it would get installed itself
    return wrapper


def _overridden(impl: type, original: type) -> dict[str, tuple[types.FunctionType, types.FunctionType]]:
    """Methods the impl's own classes define (before ``original`` in its MRO) that upstream's class has too."""
    upstream_classes = set(original.__mro__)
    found: dict[str, tuple[types.FunctionType, types.FunctionType]] = {}
    for klass in impl.__mro__:
        if klass in upstream_classes:
            break
        if is_stand_in(klass):
            continue
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


def _wrap_class(result: TargetResult, replacement: type, original: type) -> type:
    impl = replacement.__mro__[1] if is_stand_in(replacement) else replacement
    wrappers: dict[str, object] = {}
    for name, (ours, theirs) in _overridden(impl, original).items():
        wrappers[name] = _function_wrapper(result, ours, theirs, receiver=True, label=name)
    new = inspect.getattr_static(impl, "__new__", None)
    if isinstance(new, staticmethod) and new is not inspect.getattr_static(original, "__new__", None):
        from fl_patch.compare import factory

        wrappers["__new__"] = staticmethod(factory.new_wrapper(result, new.__func__, original, _CALLS[0]))
    if not wrappers:
        result.note("the impl class overrides no method upstream's class has (only constructors or new methods)")
        return replacement
    if is_stand_in(replacement):  # fl_patch's own class: the wrappers go on it, the vendor's class is untouched
        for name, wrapper in wrappers.items():
            setattr(replacement, name, wrapper)
        return replacement
    namespace: dict[str, object] = {"__module__": impl.__module__, "__qualname__": impl.__qualname__}
    namespace.update(wrappers, __doc__=impl.__doc__, __slots__=())  # instances laid out as the impl's
    return type(impl)(impl.__name__, (impl,), namespace)
