"""Turning dotted paths into objects: where a target lives, what is there now, and the impl.

A target such as ``a.b.C.meth`` does not say which prefix is the module. The module
that owns it is found when modules load: ``a.b`` owns it if ``C`` is not a submodule
of ``a.b``. Inside the owner, the path is walked with ``wrapt.resolve_path``, which
reads class members through ``vars()`` along the MRO, so a ``@staticmethod`` or
``@classmethod`` comes back as the descriptor that is really there (``getattr`` would
bind it, and re-installing the bound result breaks instance calls or pins ``cls``).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
from dataclasses import dataclass
from enum import Enum

from fl_patch.config.suggest import did_you_mean
from fl_patch.core.import_state import plugin_window
from fl_patch.core.paths import parse_impl_path

__all__ = ["Kind", "Resolved", "describe", "load_impl", "owned_path", "resolve_in", "unwrap"]

_MISSING = object()
# Descriptors that are routines even where they are not callable by themselves.
_ROUTINE_TYPES = (types.MethodDescriptorType, types.ClassMethodDescriptorType, types.WrapperDescriptorType)


class Kind(str, Enum):
    FUNCTION = "function"
    METHOD = "method"
    STATICMETHOD = "staticmethod"
    CLASSMETHOD = "classmethod"
    PROPERTY = "property"
    CLASS = "class"
    MODULE = "module"
    ATTRIBUTE = "attribute"


@dataclass(frozen=True)
class Resolved:
    """What a target path points at inside its owner module."""

    holder: object  # the module or class whose attribute is replaced
    name: str
    raw: object  # the value found (a raw descriptor for class members), or _MISSING
    own: bool  # whether ``name`` is in ``vars(holder)`` (False: inherited or missing)

    @property
    def exists(self) -> bool:
        return self.raw is not _MISSING

    @property
    def kind(self) -> Kind:
        raw = self.raw
        in_class = isinstance(self.holder, type)
        if isinstance(raw, staticmethod):
            return Kind.STATICMETHOD
        if isinstance(raw, classmethod):
            return Kind.CLASSMETHOD
        if isinstance(raw, property):
            return Kind.PROPERTY
        if isinstance(raw, type):
            return Kind.CLASS
        if isinstance(raw, types.ModuleType):
            return Kind.MODULE
        if callable(raw) or isinstance(raw, _ROUTINE_TYPES):
            return Kind.METHOD if in_class else Kind.FUNCTION
        return Kind.ATTRIBUTE


def _is_submodule(module: types.ModuleType, name: str, module_name: str) -> bool:
    fullname = f"{module_name}.{name}"
    if fullname in sys.modules:
        return True
    search_path = getattr(module, "__path__", None)
    if search_path is None:
        return False
    # PathFinder directly, not importlib.util.find_spec: this runs inside our own
    # import hook, and must neither import anything nor re-enter sys.meta_path.
    try:
        return importlib.machinery.PathFinder.find_spec(fullname, list(search_path)) is not None
    except (ImportError, ValueError):
        return False


def owned_path(
    module: types.ModuleType, parts: tuple[str, ...], module_name: str | None = None
) -> tuple[str, ...] | None:
    """The attribute path of target ``parts`` inside ``module``, or None if a submodule owns it.

    ``module_name`` is the name the module is imported under (its key in ``sys.modules``),
    which may differ from its ``__name__`` (``sys.modules["alias"] = module``).
    """
    name = module.__name__ if module_name is None else module_name
    module_parts = name.split(".")
    if tuple(parts[: len(module_parts)]) != tuple(module_parts) or len(parts) <= len(module_parts):
        return None
    rest = parts[len(module_parts) :]
    first = rest[0]
    value = module.__dict__.get(first, _MISSING)
    if isinstance(value, types.ModuleType) and value.__name__ in (f"{name}.{first}", f"{module.__name__}.{first}"):
        return None  # a submodule (or a whole-module target, handled by the finder)
    # A package may rebind a submodule's name to something else: megatron.core.inference.moe
    # does ``from .vllm_fused_moe import vllm_fused_moe``, so its attribute is a function
    # while ``...moe.vllm_fused_moe._ceil_div`` lives in the submodule. The submodule wins.
    if _is_submodule(module, first, name):
        return None
    return rest


def resolve_in(module: types.ModuleType, attr_path: tuple[str, ...]) -> Resolved:
    """Resolve ``attr_path`` in ``module``; a missing last segment gives ``exists=False``.

    Raises ``AttributeError`` naming the first missing segment when one before the
    last is missing (the holder itself does not exist).
    """
    import wrapt  # deferred: importing wrapt costs ~25 ms, paid only once something is patched

    try:
        holder, name, raw = wrapt.resolve_path(module, ".".join(attr_path))
    except AttributeError:
        holder = module
        for segment in attr_path[:-1]:
            try:
                holder = getattr(holder, segment)
            except AttributeError:
                what = "attribute or submodule" if hasattr(holder, "__path__") else "attribute"
                raise AttributeError(f"{describe(holder)} has no {what} {segment!r}") from None
        return Resolved(holder, attr_path[-1], _MISSING, False)
    try:
        own = name in vars(holder)
    except TypeError:
        own = False
    return Resolved(holder, name, raw, own)


def describe(holder: object) -> str:
    """``module a.b`` / ``class a.b.C``, for messages."""
    if isinstance(holder, types.ModuleType):
        return f"module {holder.__name__}"
    if isinstance(holder, type):
        return f"class {holder.__module__}.{holder.__qualname__}"
    return repr(holder)


def unwrap(raw: object) -> object:
    """The callable behind a descriptor, as ``original()`` hands it out."""
    if isinstance(raw, (staticmethod, classmethod)):
        return raw.__func__
    return raw


def load_impl(impl: object) -> object:
    """Import a string impl (``pkg.mod.attr`` or ``pkg.mod:attr``); return objects as they are."""
    if not isinstance(impl, str):
        return impl
    # Often inside someone's import (a target module's): what its threads and its `import a.b.c`
    # see there is decided in one place, core.import_state.
    with plugin_window():
        return _load_impl(impl)


def _holder(obj: object) -> str:
    """``module 'a.b'`` (as Python's own AttributeError names a module), else ``describe``'s ``class a.b.C``."""
    return f"module {obj.__name__!r}" if isinstance(obj, types.ModuleType) else describe(obj)


def _impl_attribute(obj: object, attr: str, holder: str) -> object:
    """``getattr(obj, attr)``; missing, an error naming ``holder`` and the closest public name it has (a typo)."""
    try:
        return getattr(obj, attr)
    except AttributeError:
        pass
    hint = did_you_mean(attr, [n for n in dir(obj) if not n.startswith("__")], n=1, cutoff=0.75)
    raise AttributeError(f"{holder} has no attribute {attr!r}{hint}") from None


def _load_impl(impl: str) -> object:
    module_path, attr_path = parse_impl_path(impl)
    if attr_path:
        obj: object = importlib.import_module(module_path)
        for attr in attr_path:
            obj = _impl_attribute(obj, attr, _holder(obj))
        return obj
    parts = module_path.split(".")
    # The longest importable prefix is the module; the rest are attributes. A
    # ModuleNotFoundError for a *different* name (something the impl module itself
    # imports) is the impl's real failure and must not be mistaken for "try shorter".
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        try:
            obj = importlib.import_module(candidate)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (candidate == exc.name or candidate.startswith(exc.name + ".")):
                continue
            raise
        for attr in parts[end:]:
            obj = _impl_attribute(obj, attr, _holder(obj))
        return obj
    raise ModuleNotFoundError(f"no module named {parts[0]!r}", name=parts[0])
