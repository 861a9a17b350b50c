"""The oracle's impls: an identical copy of each upstream object, built when fl_patch asks for it.

Every attribute of this module is a copy named by ``oracle_catalogue.impl_name`` (a form tag and
the target's path, encoded). fl_patch imports a string impl only once its target's module has
loaded, so ``__getattr__`` (PEP 562) builds each copy then, from ``fl_patch.original(target)``,
and keeps it: asked again (pickle, a second process), the same object comes back.

What a copy is, per form (``build``):

* function / method: a fresh function object with the same code, globals, name, defaults,
  closure, keyword defaults, ``__dict__`` (``__wrapped__`` of a decorated function, markers such
  as ``__isabstractmethod__``), annotations, qualname, module and doc;
* staticmethod / classmethod: the same inside a fresh descriptor of the same type;
* ``lru_cache`` (function or method): a fresh ``lru_cache`` of the same ``maxsize``/``typed``
  around a copy of the function it caches;
* property: a fresh property (of the original's type) of copied fget/fset/fdel and the same doc;
  cached_property: a fresh one around a copy of its function;
* class: a subclass that adds nothing (``__slots__ = ()``, same name and doc, the same type parameters
  for a generic class; made by ``types.new_class`` so the metaclass's ``__prepare__`` runs), whose ``__module__``/``__qualname__``
  are this module and its impl name, so pickle finds it here. A class whose design refuses a
  subclass (an Enum with members, ``__init_subclass__`` that needs arguments, a TypedDict) raises; the scanner
  records that as the entry's skip reason, so it is never registered.

Only fl_patch's public API is used (``fl_patch.original``), so the oracle runs unchanged on any
engine that keeps it.
"""

from __future__ import annotations

import functools
import importlib
import sys
import time
import types
import typing
from typing import Any

from oracle_catalogue import parse_impl_name

import fl_patch

__all__ = ["CLASSES_MODULE", "build", "copy_callable", "copy_function"]

CLASSES_MODULE = "oracle_classes"
"""Where class copies say they live (a module ``oracle_scan.py`` writes: their source, for inspect)."""


def copy_function(function: types.FunctionType) -> types.FunctionType:
    """A fresh function object that is ``function`` in every respect but identity."""
    copy = types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = None if function.__kwdefaults__ is None else dict(function.__kwdefaults__)
    copy.__dict__.update(function.__dict__)
    copy.__annotations__ = dict(function.__annotations__)
    copy.__qualname__ = function.__qualname__
    copy.__module__ = function.__module__
    copy.__doc__ = function.__doc__
    return copy


def _is_lru(obj: object) -> bool:
    return hasattr(obj, "cache_parameters") and hasattr(obj, "cache_clear") and hasattr(obj, "__wrapped__")


def copy_callable(obj: object) -> object:
    """A copy of a function, or of an ``lru_cache`` around one; ``TypeError`` for anything else."""
    if isinstance(obj, types.FunctionType):
        return copy_function(obj)
    if _is_lru(obj):
        params = obj.cache_parameters()  # type: ignore[attr-defined]
        inner = obj.__wrapped__  # type: ignore[attr-defined]
        if not isinstance(inner, types.FunctionType):
            raise TypeError(f"an lru_cache around {type(inner).__name__}, not a function")
        cached = functools.lru_cache(maxsize=params["maxsize"], typed=params["typed"])(copy_function(inner))
        # lru_cache copies the function's metadata (update_wrapper); the original wrapper's own
        # __dict__ (the same metadata, or markers set on the wrapper) is what upstream saw
        cached.__dict__.update({k: v for k, v in obj.__dict__.items() if k != "__wrapped__"})
        return cached
    raise TypeError(f"no identical copy of a {type(obj).__module__}.{type(obj).__qualname__}")


def copy_class(original: type, name: str) -> type:
    """A subclass of ``original`` that adds nothing, findable by pickle as ``oracle_impls.<name>``.

    A generic class (``class ModelBuilder(Generic[M, C])``) is subclassed as ``original[M, C]``, so
    that the copy has the same type parameters and can be subscripted as the original can."""
    if typing.is_typeddict(original):
        # its "subclass" has bases (dict,), and calling either gives a plain dict: there is no class to copy
        raise TypeError("a TypedDict: a subclass of it is not a subclass at run time (its instances are dicts)")
    parameters = getattr(original, "__parameters__", ())
    base: Any = original[parameters if len(parameters) > 1 else parameters[0]] if parameters else original  # type: ignore[index]

    def body(namespace: dict[str, Any]) -> None:
        namespace.update(__module__=CLASSES_MODULE, __qualname__=name, __doc__=original.__doc__, __slots__=())

    sub = types.new_class(original.__name__, (base,), exec_body=body)
    sub.__qualname__ = name  # a metaclass may set its own from the name
    # inspect looks a class's module up in sys.modules (never importing it): have it there
    importlib.import_module(CLASSES_MODULE)
    return sub


def build(form: str, original: object, name: str) -> object:
    """The copy of ``original`` (what ``fl_patch.original`` gives for its target) in ``form``."""
    if form in ("function", "method", "lru_cache", "lru_cache_method"):
        return copy_callable(original)
    if form == "staticmethod":
        return staticmethod(copy_callable(original))  # type: ignore[arg-type]
    if form == "classmethod":
        return classmethod(copy_callable(original))  # type: ignore[arg-type]
    if form == "property":
        if not isinstance(original, property):
            raise TypeError(f"expected a property, got {type(original).__name__}")
        parts = [None if f is None else copy_callable(f) for f in (original.fget, original.fset, original.fdel)]
        return type(original)(*parts, original.__doc__)
    if form == "cached_property":
        if not isinstance(original, functools.cached_property):
            raise TypeError(f"expected a functools.cached_property, got {type(original).__name__}")
        return functools.cached_property(copy_callable(original.func))  # type: ignore[arg-type]
    if form == "class":
        if not isinstance(original, type):
            raise TypeError(f"expected a class, got {type(original).__name__}")
        return copy_class(original, name)
    raise ValueError(f"unknown form {form!r}")


def _original(target: str) -> object:
    try:
        return fl_patch.original(target)
    except LookupError:
        pass
    # Asked before the target's module was imported (pickle in a fresh process): import it, the
    # longest importable prefix of the path, then ask again.
    parts = target.split(".")
    for end in range(len(parts) - 1, 0, -1):
        try:
            importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        break
    return fl_patch.original(target)


BUILD_SECONDS = [0.0]
"""Time spent building copies in this process (the oracle's own share of an import's cost)."""


def __getattr__(name: str) -> object:
    try:
        form, target = parse_impl_name(name)
    except ValueError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    started = time.perf_counter()
    copy = build(form, _original(target), name)
    BUILD_SECONDS[0] += time.perf_counter() - started
    module = sys.modules[__name__]
    # Two threads may build one copy at once: the first one stored wins, so every caller gets the same object.
    return module.__dict__.setdefault(name, copy)
