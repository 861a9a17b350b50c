"""Putting a replacement in place of an original, and taking it out again.

What is installed is the impl itself (or the impl re-wrapped in the descriptor kind
the original had), never a proxy: ``torch.compile`` inlines a wrapt proxy's
``__code__`` (the original's) and silently runs upstream code, and proxies neither
pickle nor deepcopy. Installing the impl keeps its own ``__module__`` and
``__qualname__``, so pickle finds it by reference and a patched call costs exactly
what calling the impl directly costs.

An installed function carries ``__wrapped__`` = the upstream function, as FlagScale's
``@overridable`` wrapper does, so impls written for FlagScale can call
``Target.__wrapped__(...)``; an impl that sets its own ``__wrapped__`` keeps it.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fl_patch.core import kinds as _kinds
from fl_patch.core.missing import mock_stand_in
from fl_patch.core.ownership import is_library_function
from fl_patch.core.resolve import Kind, Resolved, describe

if TYPE_CHECKING:
    from fl_patch.core.registration import Registration

__all__ = [
    "NO_ORIGINAL",
    "AppliedPatch",
    "Binding",
    "ImplMismatch",
    "binding",
    "build_replacement",
    "install",
    "install_module",
    "module_patch",
    "revert",
    "stands_for",
]

ABSENT = object()  # vars(holder) had no such name (inherited, or missing)
NO_ORIGINAL = object()  # a module replaced before it was ever imported: there is no upstream object

# Functions whose __wrapped__ fl_patch set: (to what, whether it set __signature__ too), so
# only that is ever undone.
_WRAPPED_BY_US: weakref.WeakKeyDictionary[types.FunctionType, tuple[object, bool]] = weakref.WeakKeyDictionary()
# fl_patch's own stand-ins (the call counter of --report) -> the impl behind each: the impl is
# marked as if it were installed itself, so an impl that reads its own ``__wrapped__`` works
# the same with and without --report (a diagnostic mode never changes behaviour).
_STANDS_FOR: weakref.WeakKeyDictionary[types.FunctionType, types.FunctionType] = weakref.WeakKeyDictionary()
# Descriptors that store per-instance data: replacing one breaks every instance.
_STORAGE_DESCRIPTORS: tuple[type, ...] = (types.MemberDescriptorType,)
try:
    from collections import _tuplegetter  # type: ignore[attr-defined]  # namedtuple's field descriptor

    _STORAGE_DESCRIPTORS += (_tuplegetter,)
except ImportError:  # pragma: no cover  (a Python without the C accelerator)
    pass


class ImplMismatch(Exception):
    """The impl cannot stand in for the target (wrong kind of object)."""


class _Strong:
    """A strong reference with a weak reference's interface."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __call__(self) -> object:
        return self.obj


def hold(obj: object) -> Callable[[], object]:
    """How a patch refers to a module: weakly. A module purged from sys.modules (before a
    re-import) must be free to go; while something else keeps it alive, uninstall() still
    restores it. Classes and other holders are held strongly (their module's globals,
    which the original function references, hold them anyway)."""
    if isinstance(obj, types.ModuleType):
        return weakref.ref(obj)
    return _Strong(obj)


# A name fl_patch rebound in a module: (the module, weakly; the name; the value to restore).
Binding = tuple[Callable[[], object], str, object]


def binding(module: object, name: str, value: object) -> Binding:
    return (hold(module), name, value)


@dataclass(eq=False)
class AppliedPatch:
    """One replacement in place: enough to undo it exactly."""

    target: str
    holder_ref: Callable[[], object]  # the module or class whose attribute was replaced (see hold())
    name: str
    kind: Kind
    previous_own: object  # what vars(holder)[name] was, or ABSENT if it was inherited/missing
    original: object  # the upstream object as resolved (raw descriptor for class members)
    installed: object
    late: bool
    whole_module: bool = False  # ``target`` is a module replaced in sys.modules
    registration: Registration | None = None
    owner: Callable[[], object] | None = None  # the module the target was resolved in (weakly)
    aliases: list[Binding] = field(default_factory=list)  # names rebound from the original
    later_bindings: list[Binding] = field(default_factory=list)  # names that imported the impl later

    @property
    def holder(self) -> object:
        return self.holder_ref()

    def is_in_place(self) -> bool:
        if self.whole_module:
            return sys.modules.get(self.target) is self.installed
        try:
            return vars(self.holder).get(self.name, ABSENT) is self.installed
        except TypeError:
            return False

    def is_dead(self) -> bool:
        """Its module is gone (purged from sys.modules and collected): nothing left to undo."""
        if self.whole_module:
            return False
        return self.holder is None or (self.owner is not None and self.owner() is None)


def _method_adapter(impl: object) -> types.FunctionType:
    """A real function that binds ``self`` for a callable that is not a function (a partial, say)."""

    def method(self: object, *args: object, **kwargs: object) -> object:
        return impl(self, *args, **kwargs)  # type: ignore[operator]

    # updated=(): never copy the impl's __dict__ (it may carry _torchdynamo_orig_callable,
    # which would make compiled callers skip this adapter).
    # (update_wrapper returns method itself: a FunctionType; impl is any callable)
    return functools.update_wrapper(method, impl, updated=())  # type: ignore[arg-type, return-value]


def build_replacement(resolved: Resolved, impl: object, *, create: bool = False) -> object:
    """The object to install for ``impl``, shaped like what ``resolved`` found."""
    if not resolved.exists:
        if not create:
            raise ImplMismatch("target is missing")
        return impl
    kind = resolved.kind
    raw = resolved.raw
    if mock_stand_in(raw):
        return impl  # upstream's mock for a missing package: nothing real to keep the shape of (missing.py)
    if isinstance(resolved.holder, type) and isinstance(raw, _STORAGE_DESCRIPTORS):
        raise ImplMismatch(
            f"{describe(resolved.holder)}.{resolved.name} is a {type(raw).__name__} (a slot or a named-tuple field: "
            "per-instance storage), not a method or class attribute: replacing it would break every instance"
        )
    # What fits is decided in _kinds, for the engine and --check alike: the wrong kind of
    # object, a signature that cannot take the target's calls, a class that does not subclass.
    cause = _kinds.refusal_cause(resolved, impl)
    if cause is not None:
        raise ImplMismatch(cause)
    if kind is Kind.CLASS:
        # isinstance/issubclass against the name must hold for the original's instances and
        # subclasses made before the patch: fl_patch's stand-in class (see _kinds).
        return _kinds.stand_in_class(raw, impl, resolved.holder, resolved.name)  # type: ignore[arg-type]
    wrapped, replacement = _kinds.rewrap(resolved, impl)
    if wrapped:
        return replacement  # the target's wrapper kind (lru_cache, cached_property, ...) kept
    if kind in (Kind.MODULE, Kind.ATTRIBUTE):
        return impl
    if isinstance(impl, (staticmethod, classmethod, property)):
        return impl
    if kind is Kind.STATICMETHOD:
        return staticmethod(impl)  # type: ignore[arg-type]
    if kind is Kind.CLASSMETHOD:
        return classmethod(impl)  # type: ignore[arg-type]
    if kind is Kind.PROPERTY:
        return property(impl, raw.fset, raw.fdel, raw.__doc__)  # type: ignore[attr-defined, arg-type]
    if kind is Kind.METHOD and not isinstance(impl, (types.FunctionType, type)):
        return _method_adapter(impl)
    return impl


def install(
    target: str,
    resolved: Resolved,
    replacement: object,
    *,
    late: bool,
    registration: Registration | None = None,
    owner: types.ModuleType | None = None,
) -> AppliedPatch:
    holder = resolved.holder
    try:
        previous_own = vars(holder).get(resolved.name, ABSENT)
    except TypeError:
        previous_own = ABSENT
    if resolved.exists and resolved.kind in (Kind.FUNCTION, Kind.METHOD, Kind.STATICMETHOD, Kind.CLASSMETHOD):
        replacement = _unshared(replacement, resolved.raw, holder, resolved.name)
    setattr(holder, resolved.name, replacement)
    patch = AppliedPatch(
        target=target,
        holder_ref=hold(holder),
        name=resolved.name,
        kind=resolved.kind if resolved.exists else Kind.ATTRIBUTE,
        previous_own=previous_own,
        original=resolved.raw,
        installed=replacement,
        late=late,
        registration=registration,
        owner=weakref.ref(owner) if owner is not None else None,
    )
    if resolved.exists and patch.kind in (Kind.FUNCTION, Kind.METHOD, Kind.STATICMETHOD, Kind.CLASSMETHOD):
        _mark_wrapped(replacement, resolved.raw)
    return patch


def install_module(
    target: str, module: types.ModuleType, replacement: types.ModuleType, *, registration: Registration | None
) -> AppliedPatch:
    """Put ``replacement`` in sys.modules (and on the parent package) in place of the loaded ``module``."""
    parent_name, _, child = target.rpartition(".")
    parent = sys.modules.get(parent_name)
    sys.modules[target] = replacement
    previous_own = NO_ORIGINAL
    if parent is not None:
        previous_own = vars(parent).get(child, NO_ORIGINAL)
        setattr(parent, child, replacement)
    return module_patch(
        target, replacement, original=module, previous_own=previous_own, late=True, registration=registration
    )


def module_patch(
    target: str,
    installed: types.ModuleType,
    *,
    original: object,
    previous_own: object,
    late: bool,
    registration: Registration | None,
) -> AppliedPatch:
    """The record of a whole module put in sys.modules under ``target`` (before or after its import)."""
    parent_name, _, child = target.rpartition(".")
    return AppliedPatch(
        target=target,
        holder_ref=hold(sys.modules.get(parent_name)),
        name=child,
        kind=Kind.MODULE,
        previous_own=previous_own,
        original=original,
        installed=installed,
        late=late,
        whole_module=True,
        registration=registration,
    )


def _function_in(obj: object) -> types.FunctionType | None:
    inner = obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj
    return inner if isinstance(inner, types.FunctionType) else None


def stands_for(stand_in: types.FunctionType, impl: types.FunctionType) -> None:
    """Record that fl_patch's ``stand_in`` (a counting wrapper) installs ``impl``."""
    _STANDS_FOR[stand_in] = impl


def _unshared(replacement: object, original: object, holder: object, name: str) -> object:
    """``replacement``, or fl_patch's own copy of its function when fl_patch may not mark the
    function itself with this target's ``__wrapped__``:

    * it already carries fl_patch's ``__wrapped__`` for another upstream (one impl for two
      targets: the CPU pack's ``reset_memory_stats``). One function cannot name two
      originals, and re-pointing it would change what the first target's ``__wrapped__`` is;
    * it is a library's function (``torch.nn.functional.silu`` used as an impl;
      ``core.ownership``): marking it would change that library for every other caller.

    The copy shares the impl's code, globals, defaults and closure (a call costs the same,
    ``torch.compile`` traces the same code); it is named where it is installed, so pickle
    finds it there.
    """
    function = _function_in(replacement)
    if function is None:
        return replacement
    upstream = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    marked = _WRAPPED_BY_US.get(function)
    shared = marked is not None and not _same_name(marked[0], upstream)
    # (the same upstream, or its fresh copy after a reload or re-import, is no second target)
    if not shared and not is_library_function(function):
        return replacement
    copy = types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__dict__.update({k: v for k, v in vars(function).items() if k not in ("__wrapped__", "__signature__")})
    copy.__doc__ = function.__doc__
    copy.__annotations__ = dict(function.__annotations__)
    _name_where_installed(copy, holder, name)
    if isinstance(replacement, staticmethod):
        return staticmethod(copy)
    if isinstance(replacement, classmethod):
        return classmethod(copy)
    return copy


def _name_where_installed(function: types.FunctionType, holder: object, name: str) -> None:
    """Give fl_patch's own function the name it is installed under, so pickle finds it there."""
    if isinstance(holder, type):
        function.__module__, function.__qualname__ = holder.__module__, f"{holder.__qualname__}.{name}"
    else:
        function.__module__, function.__qualname__ = getattr(holder, "__name__", function.__module__), name


def _same_name(a: object, b: object) -> bool:
    key = ("__module__", "__qualname__")
    return a is b or all(getattr(a, k, None) == getattr(b, k, None) is not None for k in key)


def _mark_wrapped(replacement: object, original: object) -> None:
    function = _function_in(replacement)
    upstream = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    if function is None:
        return
    _mark(function, upstream)
    behind = _STANDS_FOR.get(function)
    if behind is not None and not is_library_function(behind):
        _mark(behind, upstream)


def _mark(function: types.FunctionType, upstream: object) -> None:
    if function is upstream:
        return
    if "__wrapped__" in vars(function) and function not in _WRAPPED_BY_US:
        return  # the impl's own (functools.wraps of something): keep it
    signature_set = _WRAPPED_BY_US[function][1] if function in _WRAPPED_BY_US else False
    if not signature_set and "__signature__" not in vars(function):
        # inspect.signature() follows __wrapped__; the impl's signature stays its own.
        try:
            function.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]
            signature_set = True
        except (TypeError, ValueError):
            pass
    function.__wrapped__ = upstream  # type: ignore[attr-defined]
    _WRAPPED_BY_US[function] = (upstream, signature_set)


def _unmark_wrapped(patch: AppliedPatch) -> None:
    function = _function_in(patch.installed)
    if function is None:
        return
    for marked in (function, _STANDS_FOR.get(function)):
        if marked is not None and marked in _WRAPPED_BY_US:
            upstream, signature_set = _WRAPPED_BY_US.pop(marked)
            if vars(marked).get("__wrapped__") is upstream:
                del marked.__wrapped__  # type: ignore[attr-defined]  # set by update_wrapper, checked above
                if signature_set:
                    vars(marked).pop("__signature__", None)


def revert(patch: AppliedPatch) -> bool:
    """Undo ``patch`` if it is still in place; returns whether the holder was restored.

    A value someone else installed over ours is left alone: reverting it would
    silently undo their change. Names are restored only where fl_patch recorded them:
    aliases it rebound, and names that imported the impl after it was installed.
    """
    for module_ref, name, value in [*patch.aliases, *patch.later_bindings]:
        module = module_ref()
        if module is None:
            continue  # collected: nothing to restore
        namespace = object.__getattribute__(module, "__dict__")
        if namespace.get(name, ABSENT) is patch.installed:
            namespace[name] = value
    patch.aliases.clear()
    patch.later_bindings.clear()
    if patch.whole_module:
        return _revert_module(patch)
    if patch.holder is None or not patch.is_in_place():
        return False
    _unmark_wrapped(patch)
    if patch.previous_own is ABSENT:
        delattr(patch.holder, patch.name)
    else:
        setattr(patch.holder, patch.name, patch.previous_own)
    return True


def _revert_module(patch: AppliedPatch) -> bool:
    # ``original``/``previous_own`` are not modules when the upstream module was never
    # imported: then the name is simply removed, and the next import loads upstream.
    restored = False
    if sys.modules.get(patch.target) is patch.installed:
        if isinstance(patch.original, types.ModuleType):
            sys.modules[patch.target] = patch.original
        else:
            del sys.modules[patch.target]
        restored = True
    parent = patch.holder
    if isinstance(parent, types.ModuleType) and vars(parent).get(patch.name, ABSENT) is patch.installed:
        if isinstance(patch.previous_own, types.ModuleType):
            setattr(parent, patch.name, patch.previous_own)
        else:
            delattr(parent, patch.name)
    return restored
