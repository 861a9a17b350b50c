"""Building the object that takes a target's place, putting it there, and taking it out again.

What is installed for a function or method is **fl_patch's own function object running the impl's
code**: a fresh ``FunctionType`` over the impl's code, globals, closure and defaults, which wears
the upstream's face the way ``functools.wraps`` would make it (its ``__wrapped__`` is the upstream,
its ``__doc__`` and ``__annotations__`` the upstream's) and is named where it is installed
(``__module__``/``__qualname__``: pickle finds it there). Consequences, each a failure seen before:

- the impl itself is never written on: ``typing.get_type_hints`` and ``inspect.signature`` of the
  vendor's own function see exactly what they saw before fl_patch; an impl shared by two targets,
  or a library's function used as an impl (``torch.nn.functional.silu``), is two independent copies;
- of the patched name, ``inspect.signature``, ``get_type_hints`` and ``inspect.signature(eval_str=True)``
  follow ``__wrapped__`` to the upstream (as for any ``functools.wraps`` wrapper): a
  ``(*args, **kwargs)`` impl shows upstream's signature, and string annotations are evaluated in
  the upstream's module, where they were written;
- ``Target.__wrapped__`` (how FlagScale impls reach the original) is the upstream whatever the impl
  is: a ``@torch.no_grad()``-decorated impl carries its own ``__wrapped__`` (its inner function),
  which no longer matters;
- no proxy: ``torch.compile`` traces the impl's code (it inlines a wrapt proxy's ``__code__``,
  the original's, and silently runs upstream), and a patched call costs a call of the impl.

Where the impl names a parameter differently (``core.signatures`` renames), fl_patch's function is
an adapter that passes keyword calls on under the impl's names; only then is there a second call.

Class targets are ``core.classes``; this module records their changes like any other patch.
"""

from __future__ import annotations

import functools
import sys
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fl_patch.core import classes as _classes
from fl_patch.core.kinds import rewrap
from fl_patch.core.missing import mock_stand_in
from fl_patch.core.resolve import Kind, Resolved, describe

if TYPE_CHECKING:
    from fl_patch.core.registration import Registration

__all__ = [
    "ABSENT",
    "NO_ORIGINAL",
    "AppliedPatch",
    "Binding",
    "ImplMismatch",
    "Wrap",
    "binding",
    "build_replacement",
    "module_patch",
    "put",
    "put_class",
    "put_module",
    "revert",
]

ABSENT = _classes.ABSENT  # vars(holder) had no such name (inherited, or missing)
NO_ORIGINAL = object()  # a module replaced before it was ever imported: there is no upstream object

# Descriptors that store per-instance data: replacing one breaks every instance.
_STORAGE_DESCRIPTORS: tuple[type, ...] = (types.MemberDescriptorType,)
try:
    from collections import _tuplegetter  # type: ignore[attr-defined]  # namedtuple's field descriptor

    _STORAGE_DESCRIPTORS += (_tuplegetter,)
except ImportError:  # pragma: no cover  (a Python without the C accelerator)
    pass

# The upstream's face, as functools.WRAPPER_ASSIGNMENTS lists it, less the names (named where installed).
_FACE = tuple(a for a in functools.WRAPPER_ASSIGNMENTS if a not in ("__module__", "__name__", "__qualname__"))

# A hook the engine passes in (report mode's call counter, compare mode): (target, function, upstream, kind) ->
# the function to install in its place. Only ever given fl_patch's own function objects.
Wrap = Callable[[str, types.FunctionType, object, Kind], types.FunctionType]


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
    installed: object  # what vars(holder)[name] is now (for a redirected class: the class itself)
    late: bool
    whole_module: bool = False  # ``target`` is a module replaced in sys.modules
    registration: Registration | None = None
    owner: Callable[[], object] | None = None  # the module the target was resolved in (weakly)
    impl_module: str | None = None  # the impl's own module: it keeps its names to the original
    class_changes: list[_classes.ClassChange] = field(default_factory=list)  # a redirected class's own attributes
    proxy: object | None = None  # another tool's object proxy kept at the target (its __wrapped__ is ours)
    inside: bool = False  # a ``Name.__new__`` patch put inside the class patch's redirect (core.classes.put_inside)
    aliases: list[Binding] = field(default_factory=list)  # names rebound from the original
    later_bindings: list[Binding] = field(default_factory=list)  # names that imported the impl later

    @property
    def holder(self) -> object:
        return self.holder_ref()

    @property
    def redirected(self) -> bool:
        """A class target whose name still holds the upstream class (``core.classes`` redirect)."""
        return bool(self.class_changes)

    def is_in_place(self) -> bool:
        if self.whole_module:
            return sys.modules.get(self.target) is self.installed
        try:
            current = vars(self.holder).get(self.name, ABSENT)
        except TypeError:
            return False
        if self.redirected:
            return current is self.installed and _classes.redirect_in_place(self.installed, self.class_changes)
        if self.inside:
            return _classes.inside(self.holder) is _function_of(self.installed)
        if self.proxy is not None:
            return current is self.proxy and _proxy_target(self.proxy) is self.installed
        # (a Name.__new__ patch that a later class patch's redirect runs as upstream's: still in place, beneath it)
        return current is self.installed or (self.name == "__new__" and _classes.beneath(self.holder) is self.installed)

    def is_dead(self) -> bool:
        """Its module is gone (purged from sys.modules and collected): nothing left to undo."""
        if self.whole_module:
            return False
        return self.holder is None or (self.owner is not None and self.owner() is None)


# ---------------------------------------------------------------------------------- building
def build_replacement(
    target: str,
    resolved: Resolved,
    impl: object,
    *,
    create: bool = False,
    renames: dict[str, str] | None = None,
    wrap: Wrap | None = None,
) -> object:
    """The object to put at the target for ``impl`` (not for a class target: ``put_class``), shaped like
    what ``resolved`` found. ``kinds.decide`` has accepted ``impl``; ``renames`` are its renames."""
    if not resolved.exists:
        if not create:
            raise ImplMismatch("target is missing")
        return impl
    kind = resolved.kind
    raw = _proxied(resolved.raw)
    if mock_stand_in(raw):
        return impl  # upstream's mock for a missing package: nothing real to keep the shape of (missing.py)
    if isinstance(resolved.holder, type) and isinstance(raw, _STORAGE_DESCRIPTORS):
        raise ImplMismatch(
            f"{describe(resolved.holder)}.{resolved.name} is a {type(raw).__name__} (a slot or a named-tuple field: "
            "per-instance storage), not a method or class attribute: replacing it would break every instance"
        )
    try:
        wrapped, replacement = rewrap(Resolved(resolved.holder, resolved.name, raw, resolved.own), impl)
    except Exception as exc:  # noqa: BLE001  (KindMismatch: decide() said so already; never half-built)
        raise ImplMismatch(str(exc)) from None
    if wrapped:
        return replacement  # the target's wrapper kind (lru_cache, cached_property, ...) kept
    if kind in (Kind.MODULE, Kind.ATTRIBUTE, Kind.CLASS):
        return impl
    if kind is Kind.PROPERTY:
        if isinstance(impl, property):
            return impl
        return property(impl, raw.fset, raw.fdel, raw.__doc__)  # type: ignore[attr-defined, arg-type]
    descriptor: type | None = None
    if kind is Kind.STATICMETHOD:
        descriptor = staticmethod
    elif kind is Kind.CLASSMETHOD:
        descriptor = classmethod
    inner = impl.__func__ if isinstance(impl, (staticmethod, classmethod)) else impl
    upstream = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    if isinstance(inner, types.FunctionType):
        function = _copy(inner)
    elif kind is Kind.METHOD and callable(inner) and not isinstance(inner, type):
        function = _method_adapter(inner)
    else:
        # A builtin, a partial, a callable object for a function target: installed as it is
        # (it has no code of its own to run under the upstream's face).
        return descriptor(inner) if descriptor is not None else inner
    if renames:
        function = _renaming(function, renames)
    if wrap is not None:
        function = wrap(target, function, upstream, kind)
    _wear_face(function, upstream, resolved.holder, resolved.name)
    return descriptor(function) if descriptor is not None else function


def _copy(function: types.FunctionType) -> types.FunctionType:
    """fl_patch's own function object running ``function``'s code (``function`` itself is never changed)."""
    copy = types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = dict(function.__kwdefaults__) if function.__kwdefaults__ else None
    # Its own attributes (a compiled impl's _torchdynamo_orig_callable, say), less what says what it wraps.
    copy.__dict__.update({k: v for k, v in vars(function).items() if k not in ("__wrapped__", "__signature__")})
    return copy


def _method_adapter(impl: object) -> types.FunctionType:
    """A real function that binds ``self`` for a callable that is not a function (a partial, say)."""

    def method(self: object, *args: object, **kwargs: object) -> object:
        return impl(self, *args, **kwargs)  # type: ignore[operator]

    return method  # type: ignore[return-value]  # a def: a FunctionType


def _renaming(function: types.FunctionType, renames: dict[str, str]) -> types.FunctionType:
    """``function`` called with keyword arguments under the impl's names (``renames``: upstream's -> impl's)."""
    mapping = dict(renames)

    def adapter(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            kwargs = {mapping.get(key, key): value for key, value in kwargs.items()}
        return function(*args, **kwargs)

    return adapter  # type: ignore[return-value]  # a def: a FunctionType


def _wear_face(function: types.FunctionType, upstream: object, holder: object, name: str) -> None:
    """The upstream's face on fl_patch's own ``function``, named where it is installed."""
    for attribute in _FACE:
        try:
            value = getattr(upstream, attribute)
        except AttributeError:
            continue
        try:
            setattr(function, attribute, value)
        except (AttributeError, TypeError):
            pass
    function.__name__ = name
    if isinstance(holder, type):
        function.__module__, function.__qualname__ = holder.__module__, f"{holder.__qualname__}.{name}"
    else:
        function.__module__, function.__qualname__ = getattr(holder, "__name__", function.__module__), name
    function.__wrapped__ = upstream  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------- other tools' proxies
def _is_proxy(obj: object) -> bool:
    """An object proxy (wrapt's ``ObjectProxy``/``FunctionWrapper``, or a vendored copy of it): its class
    computes ``__wrapped__`` (a property, or a C getset). ``functools.wraps`` wrappers keep
    ``__wrapped__`` in their instance ``__dict__``; ``staticmethod``/``classmethod`` store it in a
    read-only slot: neither is a proxy."""
    if isinstance(obj, type):
        return False
    for klass in type(obj).__mro__:
        descriptor = vars(klass).get("__wrapped__")
        if descriptor is not None:
            return isinstance(descriptor, (property, types.GetSetDescriptorType))
    return False


def _proxied(raw: object) -> object:
    """What an object proxy at the target stands for (the upstream), else ``raw``."""
    while _is_proxy(raw):
        raw = raw.__wrapped__  # type: ignore[attr-defined]
    return raw


def _innermost_proxy(raw: object) -> object | None:
    found = None
    while _is_proxy(raw):
        found = raw
        raw = raw.__wrapped__  # type: ignore[attr-defined]
    return found


def _proxy_target(proxy: object) -> object:
    return proxy.__wrapped__  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------- putting in place
def put(
    target: str,
    resolved: Resolved,
    replacement: object,
    *,
    late: bool,
    registration: Registration | None = None,
    owner: types.ModuleType | None = None,
    impl_module: str | None = None,
) -> AppliedPatch:
    """Set ``replacement`` at the target and record how to undo it.

    Another tool's object proxy at the target (tracing installed through wrapt's post-import
    hooks, as OpenTelemetry and ddtrace instrument) is kept: the replacement goes inside it, in
    place of what it wrapped, so the tool keeps seeing every call.
    """
    holder = resolved.holder
    try:
        previous_own = vars(holder).get(resolved.name, ABSENT)
    except TypeError:
        previous_own = ABSENT
    proxy = _innermost_proxy(resolved.raw) if resolved.exists and resolved.own else None
    original = resolved.raw
    redirect = _classes.redirect_state_at(holder, resolved.name)
    if redirect is not None:
        # ``Name.__new__`` where the class's own patch has its redirect: set at the name, it would remove the
        # redirect (Name(...) building upstream's class, both patches reported applied); inside, the redirect
        # runs it where it ran upstream's __new__. Its original is upstream's __new__, not the redirect.
        previous_own = _classes.put_inside(redirect, _function_of(replacement))  # type: ignore[arg-type]
        original = staticmethod(_classes.upstream_new(holder))  # type: ignore[arg-type]
    elif proxy is not None:
        original = proxy.__wrapped__  # type: ignore[attr-defined]
        proxy.__wrapped__ = replacement  # type: ignore[attr-defined]
    else:
        setattr(holder, resolved.name, replacement)
    return AppliedPatch(
        target=target,
        holder_ref=hold(holder),
        name=resolved.name,
        kind=resolved.kind if resolved.exists else Kind.ATTRIBUTE,
        previous_own=previous_own,
        original=original,
        installed=replacement,
        late=late,
        registration=registration,
        owner=weakref.ref(owner) if owner is not None else None,
        impl_module=impl_module,
        proxy=proxy,
        inside=redirect is not None,
    )


def _function_of(value: object) -> object:
    return value.__func__ if isinstance(value, staticmethod | classmethod) else value


def put_class(
    target: str,
    resolved: Resolved,
    impl: type,
    *,
    late: bool,
    registration: Registration | None = None,
    owner: types.ModuleType | None = None,
    impl_module: str | None = None,
) -> tuple[AppliedPatch, list[str]]:
    """A class target (``core.classes``): redirected at its own definition, else the name rebound to a
    stand-in. Returns the patch and notes for the record."""
    original = resolved.raw
    assert isinstance(original, type)
    if _classes.strategy(resolved.holder, resolved.name, original) == "redirect":
        try:
            changes, notes = _classes.redirect(original, impl)
        except _classes.ClassImplError as exc:
            raise ImplMismatch(str(exc)) from None
        patch = AppliedPatch(
            target=target,
            holder_ref=hold(resolved.holder),
            name=resolved.name,
            kind=Kind.CLASS,
            previous_own=original,
            original=original,
            installed=original,
            late=late,
            registration=registration,
            owner=weakref.ref(owner) if owner is not None else None,
            impl_module=impl_module,
            class_changes=changes,
        )
        return patch, notes
    try:
        stand_in = _classes.stand_in_class(original, impl, resolved.holder, resolved.name)
    except _classes.ClassImplError as exc:
        raise ImplMismatch(str(exc)) from None
    patch = put(target, resolved, stand_in, late=late, registration=registration, owner=owner, impl_module=impl_module)
    return patch, []


def put_module(
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
        impl_module=getattr(installed, "__name__", None),
    )


# ---------------------------------------------------------------------------------- undoing
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
    if patch.redirected:
        _classes.undo(patch.installed, patch.class_changes)  # type: ignore[arg-type]
        return True
    if patch.inside:
        return _classes.take_out(patch.holder, _function_of(patch.installed), patch.previous_own)  # type: ignore[arg-type]
    if patch.proxy is not None:
        patch.proxy.__wrapped__ = patch.original  # type: ignore[attr-defined]
        return True
    if patch.name == "__new__" and _classes.replace_beneath(patch.holder, patch.installed, patch.previous_own):
        return True  # beneath a class patch's redirect (applied after this one): what this replaced runs there again
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
