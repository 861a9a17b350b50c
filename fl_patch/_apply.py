"""Putting a replacement in place of an original, and taking it out again.

What is installed is the impl itself (or the impl re-wrapped in the descriptor kind
the original had), never a proxy: ``torch.compile`` inlines a wrapt proxy's
``__code__`` (the original's) and silently runs upstream code, and proxies neither
pickle nor deepcopy. Installing the impl keeps its own ``__module__`` and
``__qualname__``, so pickle finds it by reference and a patched call costs exactly
what calling the impl directly costs.
"""

from __future__ import annotations

import functools
import sys
import types
from dataclasses import dataclass, field

from ._aliases import AliasBinding
from ._resolve import Kind, Resolved

__all__ = ["AppliedPatch", "ImplMismatch", "build_replacement", "install", "revert"]

_ABSENT = object()


class ImplMismatch(Exception):
    """The impl cannot stand in for the target (wrong kind of object)."""


@dataclass(eq=False)
class AppliedPatch:
    """One replacement in place: enough to undo it exactly."""

    target: str
    holder: object
    name: str
    kind: Kind
    previous_own: object  # what vars(holder)[name] was, or _ABSENT if it was inherited/missing
    original: object  # the upstream object as resolved (raw descriptor for class members)
    installed: object
    late: bool
    whole_module: bool = False  # ``target`` is a module replaced in sys.modules
    aliases: list[AliasBinding] = field(default_factory=list)

    def is_in_place(self) -> bool:
        if self.whole_module:
            return sys.modules.get(self.target) is self.installed
        try:
            return vars(self.holder).get(self.name, _ABSENT) is self.installed
        except TypeError:
            return False


def _method_adapter(impl: object) -> types.FunctionType:
    """A real function that binds ``self`` for a callable that is not a function (a partial, say)."""

    def method(self: object, *args: object, **kwargs: object) -> object:
        return impl(self, *args, **kwargs)  # type: ignore[operator]

    # updated=(): never copy the impl's __dict__ (it may carry _torchdynamo_orig_callable,
    # which would make compiled callers skip this adapter).
    return functools.update_wrapper(method, impl, updated=())  # type: ignore[arg-type]


def build_replacement(resolved: Resolved, impl: object, *, create: bool = False) -> object:
    """The object to install for ``impl``, shaped like what ``resolved`` found."""
    if not resolved.exists:
        if not create:
            raise ImplMismatch("target is missing")
        return impl
    kind = resolved.kind
    raw = resolved.raw
    if kind is Kind.CLASS:
        if not isinstance(impl, type):
            raise ImplMismatch(f"target is a class, impl is a {type(impl).__name__}")
        if impl is raw:
            raise ImplMismatch("impl is the target class itself")
        if not issubclass(impl, raw):  # type: ignore[arg-type]
            raise ImplMismatch(
                f"replacement class {impl.__module__}.{impl.__qualname__} does not subclass "
                f"{raw.__module__}.{raw.__qualname__}, so isinstance checks against the original would fail"  # type: ignore[attr-defined]
            )
        return impl
    if kind in (Kind.MODULE, Kind.ATTRIBUTE):
        return impl
    if isinstance(impl, (staticmethod, classmethod, property)):
        return impl
    if not callable(impl):
        raise ImplMismatch(f"target is a {kind.value}, impl is not callable ({type(impl).__name__})")
    if kind is Kind.STATICMETHOD:
        return staticmethod(impl)  # type: ignore[arg-type]
    if kind is Kind.CLASSMETHOD:
        return classmethod(impl)  # type: ignore[arg-type]
    if kind is Kind.PROPERTY:
        return property(impl, raw.fset, raw.fdel, raw.__doc__)  # type: ignore[attr-defined, arg-type]
    if kind is Kind.METHOD and not isinstance(impl, (types.FunctionType, type)):
        return _method_adapter(impl)
    return impl


def install(target: str, resolved: Resolved, replacement: object, *, late: bool) -> AppliedPatch:
    holder = resolved.holder
    try:
        previous_own = vars(holder).get(resolved.name, _ABSENT)
    except TypeError:
        previous_own = _ABSENT
    setattr(holder, resolved.name, replacement)
    return AppliedPatch(
        target=target,
        holder=holder,
        name=resolved.name,
        kind=resolved.kind if resolved.exists else Kind.ATTRIBUTE,
        previous_own=previous_own,
        original=resolved.raw,
        installed=replacement,
        late=late,
    )


def revert(patch: AppliedPatch) -> bool:
    """Undo ``patch`` if it is still in place; returns whether the holder was restored.

    A value someone else installed over ours is left alone: reverting it would
    silently undo their change.
    """
    for module, name, value in patch.aliases:
        namespace = object.__getattribute__(module, "__dict__")
        if namespace.get(name, _ABSENT) is patch.installed:
            namespace[name] = value
    patch.aliases.clear()
    if patch.whole_module:
        return _revert_module(patch)
    if not patch.is_in_place():
        return False
    if patch.previous_own is _ABSENT:
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
    if isinstance(parent, types.ModuleType) and vars(parent).get(patch.name, _ABSENT) is patch.installed:
        if isinstance(patch.previous_own, types.ModuleType):
            setattr(parent, patch.name, patch.previous_own)
        else:
            delattr(parent, patch.name)
    return restored
