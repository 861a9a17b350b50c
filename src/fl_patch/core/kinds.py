"""What an impl must be to stand in for its target, by the kind of the target: one place.

The engine (``core.apply.build_replacement``) and ``--check`` (``introspection.check``) both ask this module,
so a registration the engine refuses is an error in ``--check`` with the same words, and
one ``--check`` calls ok is one the engine installs.

Three questions, each answered here only:

- **Class targets** (``stand_in_class``). Upstream code checks ``isinstance(x, Name)`` and
  ``issubclass(S, Name)`` against whatever ``Name`` is when the check runs. Once a class
  is replaced, ``Name`` is the replacement; instances of the original made before the
  patch, subclasses of the original defined before it (megatron's ``MLATransformerConfig``
  is defined in the same module body as ``TransformerConfig``, so always before), and ABC
  virtual subclasses registered with the original would all fail the check. Python decides
  ``isinstance(x, Name)`` by ``type(Name).__instancecheck__``, and the impl's metaclass
  cannot be changed in place (``type`` is immutable). So what is installed is fl_patch's
  own *stand-in*: a subclass of the impl, named and placed like the target, whose
  metaclass (a subclass of the impl's own) also accepts everything the original accepts.
  It adds nothing else: no slots, no methods; its instances are instances of the impl.
- **Wrapper kinds** (``WRAPPERS``). A target wrapped by ``functools.lru_cache``,
  ``singledispatch``, ``singledispatchmethod``, ``cached_property`` or ``property`` has
  callers that use the wrapper's API (megatron calls ``self.forward.cache_clear()`` on
  ``YarnRotaryEmbedding``). The replacement keeps that kind: a plain impl is wrapped the
  same way (same ``maxsize``/``typed``; a fresh ``cached_property`` given its name), an
  impl of that kind is used as it is, and where no wrapping keeps the meaning
  (``singledispatch``: which overloads would still run?) a plain impl is refused.
- **Wrong kinds** (``refusal``): an impl that would drop or add the receiver (a
  staticmethod, classmethod, property or class for a method; a classmethod for a
  function; ...) is refused, and so is one whose signature cannot take every call the
  target takes (``introspection.signatures.compare_signatures`` errors).
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fl_patch.core.resolve import Kind, Resolved, describe
from fl_patch.core.signatures import Finding, compare_signatures

__all__ = [
    "ORIGINAL_ATTR",
    "Wrapper",
    "fits",
    "is_stand_in",
    "kind_problem",
    "prefixed",
    "read_signature",
    "refusal",
    "refusal_cause",
    "rewrap",
    "stand_in_class",
    "torchscript_callers",
    "wrapper_of",
]

# ---------------------------------------------------------------------------------- classes
ORIGINAL_ATTR = "__fl_patch_original__"  # on a stand-in: the upstream class it stands in for
_IMPL_ATTR = "__fl_patch_impl__"  # on a stand-in: the registered impl class

# One stand-in metaclass per metaclass of an impl (type, ABCMeta, a library's own).
_METAS: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()


def _own(cls: type, name: str) -> object:
    # Only the stand-in's own entry: a class that subclasses the stand-in later is an
    # ordinary class (its checks are the usual ones).
    return type.__dict__["__dict__"].__get__(cls).get(name)


_CHECKING = threading.local()


def _guarded(cls: type, sub: object, check: Callable[[Any, Any], bool], obj: object, original: object) -> bool:
    """``check(obj, original)``, unless this very question is already being asked on this thread.

    An ABC's check walks the original's subclasses, which include the impl and so the
    stand-in, which asks the original again: the inner question answers by the stand-in's
    own class machinery alone.
    """
    active: set[tuple[int, int]] = _CHECKING.__dict__.setdefault("active", set())
    key = (id(cls), id(sub))
    if key in active:
        return False
    active.add(key)
    try:
        return check(obj, original)
    finally:
        active.discard(key)


def _stand_in_meta(meta: type) -> type:
    cached = _METAS.get(meta)
    if cached is not None:
        return cached

    def __instancecheck__(cls: type, obj: object) -> bool:
        original = _own(cls, ORIGINAL_ATTR)
        if original is not None and _guarded(cls, type(obj), isinstance, obj, original):
            return True
        return meta.__instancecheck__(cls, obj)  # type: ignore[call-arg]  # the metaclass's own, given cls

    def __subclasscheck__(cls: type, sub: type) -> bool:
        original = _own(cls, ORIGINAL_ATTR)
        if original is not None and _guarded(cls, sub, issubclass, sub, original):
            return True
        return meta.__subclasscheck__(cls, sub)  # type: ignore[call-arg]  # the metaclass's own, given cls

    def __repr__(cls: type) -> str:
        impl = _own(cls, _IMPL_ATTR)
        if impl is None:
            return meta.__repr__(cls)  # type: ignore[call-arg]  # the metaclass's own, given cls
        return f"<class '{cls.__module__}.{cls.__qualname__}' (fl_patch: {impl.__module__}.{impl.__qualname__})>"  # type: ignore[attr-defined]

    namespace = {
        "__instancecheck__": __instancecheck__,
        "__subclasscheck__": __subclasscheck__,
        "__repr__": __repr__,
        "__module__": __name__,
        "__qualname__": f"StandIn[{meta.__qualname__}]",
    }
    derived = type(meta)(f"StandIn[{meta.__name__}]", (meta,), namespace)
    _METAS[meta] = derived
    return derived


def is_stand_in(obj: object) -> bool:
    return isinstance(obj, type) and _own(obj, ORIGINAL_ATTR) is not None


def stand_in_class(original: type, impl: type, holder: object, name: str) -> type:
    """fl_patch's class to install at ``holder.name`` for ``impl`` (a subclass of ``original``).

    Named and placed like the target (``__module__``/``__qualname__`` of where it is
    installed), so pickle finds it by the upstream name; ``__slots__ = ()`` so its
    instances are laid out exactly as the impl's. Raises ``ImplMismatch`` when the impl's
    class machinery refuses a subclass (``__init_subclass__`` that needs arguments, ...).
    """
    from fl_patch.core.apply import ImplMismatch

    if isinstance(holder, type):
        module, qualname = holder.__module__, f"{holder.__qualname__}.{name}"
    else:
        module, qualname = getattr(holder, "__name__", original.__module__), name
    namespace = {
        "__module__": module,
        "__qualname__": qualname,
        "__doc__": impl.__doc__,
        "__slots__": (),
        ORIGINAL_ATTR: original,
        _IMPL_ATTR: impl,
    }
    try:
        return _stand_in_meta(type(impl))(name, (impl,), namespace)
    except Exception as exc:  # noqa: BLE001  (the impl's own class machinery: reported, not raised)
        raise ImplMismatch(
            f"cannot build the class that keeps isinstance/issubclass of the original "
            f"(a subclass of {impl.__module__}.{impl.__qualname__}): {type(exc).__name__}: {exc}"
        ) from None


# ---------------------------------------------------------------------------------- wrappers
@dataclass(frozen=True)
class Wrapper:
    """A wrapper kind whose callers use its API."""

    name: str  # as messages say it: functools.lru_cache
    api: tuple[str, ...]  # what callers of the original may use
    detect: Callable[[object], bool]
    wrap: Callable[[object, object, object, str], object] | None  # (raw, impl, holder, name) -> replacement


def _is_lru(obj: object) -> bool:
    return callable(getattr(obj, "cache_parameters", None)) and callable(getattr(obj, "cache_clear", None))


def _is_singledispatch(obj: object) -> bool:
    return callable(obj) and callable(getattr(obj, "register", None)) and callable(getattr(obj, "dispatch", None))


def _wrap_lru(raw: object, impl: object, holder: object, name: str) -> object:
    params = raw.cache_parameters()  # type: ignore[attr-defined]
    # fl_patch's own wrapper (the impl is not touched); its __wrapped__ is the impl, as lru_cache sets.
    return functools.lru_cache(maxsize=params["maxsize"], typed=params["typed"])(impl)


def _wrap_cached_property(raw: object, impl: object, holder: object, name: str) -> object:
    func = impl.func if isinstance(impl, functools.cached_property) else impl
    # Always a fresh one: __set_name__ records the name on the object, and a vendor's
    # cached_property must not be bound to a second name (or changed) by fl_patch.
    replacement: functools.cached_property[Any] = functools.cached_property(func)  # type: ignore[arg-type]
    replacement.__set_name__(holder, name)  # type: ignore[arg-type]  # holder: the class that owns name
    return replacement


WRAPPERS: tuple[Wrapper, ...] = (
    Wrapper("functools.lru_cache", ("cache_clear", "cache_info", "cache_parameters"), _is_lru, _wrap_lru),
    Wrapper(
        "functools.cached_property",
        ("attrname",),
        lambda obj: isinstance(obj, functools.cached_property),
        _wrap_cached_property,
    ),
    Wrapper(
        "functools.singledispatchmethod",
        ("register",),
        lambda obj: isinstance(obj, functools.singledispatchmethod),
        None,
    ),
    Wrapper("functools.singledispatch", ("register", "dispatch", "registry"), _is_singledispatch, None),
)


def wrapper_of(obj: object) -> Wrapper | None:
    for wrapper in WRAPPERS:
        if wrapper.detect(obj):
            return wrapper
    return None


def rewrap(resolved: Resolved, impl: object) -> tuple[bool, object]:
    """(whether the target is a wrapper kind, the replacement for it); raises ImplMismatch."""
    from fl_patch.core.apply import ImplMismatch

    wrapper = wrapper_of(resolved.raw)
    if wrapper is None:
        return False, impl
    if wrapper.detect(impl) and wrapper.wrap is not _wrap_cached_property:
        return True, impl  # already that kind, with its API
    if wrapper.wrap is None:
        raise ImplMismatch(
            f"the target is a {wrapper.name} (callers use its .{', .'.join(wrapper.api)}); "
            f"the impl must be one too (it is a {_kind_name(impl)})"
        )
    own_kind = isinstance(impl, functools.cached_property) and wrapper.wrap is _wrap_cached_property
    if not own_kind and (isinstance(impl, _DESCRIPTORS) or not callable(impl)):
        raise ImplMismatch(f"the target is a {wrapper.name}, the impl a {_kind_name(impl)}")
    return True, wrapper.wrap(resolved.raw, impl, resolved.holder, resolved.name)


def _kind_name(obj: object) -> str:
    wrapper = wrapper_of(obj)
    if wrapper is not None:
        return wrapper.name
    if isinstance(obj, type):
        return "class"
    if isinstance(obj, types.FunctionType):
        return "plain function"
    return type(obj).__name__


# ---------------------------------------------------------------------------------- wrong kinds
_DESCRIPTORS = (staticmethod, classmethod, property, functools.cached_property)


def _receiver_note(kind: Kind) -> str:
    return {
        Kind.METHOD: "a method (it receives self)",
        Kind.CLASSMETHOD: "a classmethod (it receives cls)",
        Kind.STATICMETHOD: "a staticmethod",
        Kind.FUNCTION: "a function",
        Kind.PROPERTY: "a property",
    }.get(kind, kind.value)


def refusal(resolved: Resolved, impl: object) -> str | None:
    """Why ``impl`` is the wrong kind of object for the target (None: the kind fits)."""
    kind = resolved.kind
    if kind not in (Kind.FUNCTION, Kind.METHOD, Kind.STATICMETHOD, Kind.CLASSMETHOD, Kind.PROPERTY):
        return None
    if wrapper_of(resolved.raw) is not None:
        return None  # rewrap() decides
    descriptor = type(impl).__name__ if isinstance(impl, _DESCRIPTORS) else None
    allowed: dict[Kind, tuple[type, ...]] = {
        Kind.FUNCTION: (staticmethod,),
        Kind.METHOD: (),
        Kind.STATICMETHOD: (staticmethod,),
        Kind.CLASSMETHOD: (classmethod,),
        Kind.PROPERTY: (property,),
    }
    if descriptor is not None and not isinstance(impl, allowed[kind]):
        what = {
            staticmethod: "it would drop the receiver",
            classmethod: "it would receive the class instead",
            property: "it would be read, not called",
        }
        why = next((w for t, w in what.items() if isinstance(impl, t)), "")
        return f"the target is {_receiver_note(kind)}, the impl a {descriptor}" + (f": {why}" if why else "")
    if kind is Kind.METHOD and isinstance(impl, type):
        return (
            f"the target is {_receiver_note(kind)}, the impl a class ({impl.__module__}.{impl.__qualname__}): "
            "a class stored on a class is not bound, so it would drop self"
        )
    plain = impl.__func__ if isinstance(impl, (staticmethod, classmethod)) else impl
    if not isinstance(impl, property) and not callable(plain):
        return f"the target is {_receiver_note(kind)}, the impl is not callable ({_kind_name(impl)})"
    return None


# ---------------------------------------------------------------------------------- signatures
def read_signature(obj: object, what: str) -> tuple[inspect.Signature | None, Finding | None]:
    try:
        return inspect.signature(obj), None  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        return None, Finding("warning", f"cannot read the signature of the {what}: {exc}")


def _compare(target: object, impl: object, *, receiver: bool) -> list[Finding] | None:
    """None when the target's signature cannot be read (a C function: nothing to compare)."""
    t_sig, _ = read_signature(target, "target")
    if t_sig is None:
        return None
    i_sig, i_problem = read_signature(impl, "impl")
    if i_sig is None:
        return [i_problem] if i_problem is not None else []
    return compare_signatures(t_sig, i_sig, receiver=receiver)


def prefixed(finding: Finding, prefix: str) -> Finding:
    return Finding(finding.level, prefix + finding.message)


def kind_problem(resolved: Resolved, impl: object) -> str | None:
    """Why ``impl`` is the wrong kind of object for what ``resolved`` found (None: the kind fits)."""
    raw = resolved.raw
    if resolved.kind is Kind.CLASS:
        if not inspect.isclass(impl):
            return f"the target is a class, the impl a {type(impl).__name__}"
        if impl is raw:
            return "the impl is the target class itself"
        if not issubclass(impl, raw):  # type: ignore[arg-type]
            return (
                f"replacement class {impl.__module__}.{impl.__qualname__} does not subclass "
                f"{raw.__module__}.{raw.__qualname__}, so isinstance checks against the original would fail"  # type: ignore[attr-defined]
            )
        return None
    if wrapper_of(raw) is not None:
        from fl_patch.core.apply import ImplMismatch

        try:
            rewrap(resolved, impl)
        except ImplMismatch as exc:
            return str(exc)
        return None
    return refusal(resolved, impl)


def _signature_findings(resolved: Resolved, impl: object) -> list[Finding] | None:
    raw = resolved.raw
    kind = resolved.kind
    plain = impl.__func__ if isinstance(impl, (staticmethod, classmethod)) else impl
    if kind is Kind.CLASS:
        constructor = _compare(raw, impl, receiver=False)
        return None if constructor is None else [prefixed(f, "constructor: ") for f in constructor]
    wrapper = wrapper_of(raw)
    if wrapper is not None:
        if wrapper.wrap is None:
            return None  # the impl is of the target's own kind: its signature is its own affair
        inner = raw.func if isinstance(raw, functools.cached_property) else raw
        theirs = impl.func if isinstance(impl, functools.cached_property) else impl
        return _compare(inner, theirs, receiver=isinstance(resolved.holder, type))
    if kind in (Kind.MODULE, Kind.ATTRIBUTE):
        if kind is Kind.ATTRIBUTE and raw is not None and not isinstance(impl, type(raw)):
            message = f"the target is of type {type(raw).__name__}, the impl of type {type(impl).__name__}"
            return [Finding("warning", message)]
        return None
    if kind is Kind.FUNCTION:
        return _compare(raw, plain, receiver=False)
    if kind is Kind.METHOD:
        return _compare(raw, impl, receiver=True)
    if kind is Kind.STATICMETHOD:
        return _compare(raw.__func__, plain, receiver=False)  # type: ignore[attr-defined]
    if kind is Kind.CLASSMETHOD:
        return _compare(raw.__func__, plain, receiver=True)  # type: ignore[attr-defined]
    if kind is Kind.PROPERTY:
        getter = impl.fget if isinstance(impl, property) else impl
        if getter is None or raw.fget is None:  # type: ignore[attr-defined]
            return None
        return _compare(raw.fget, getter, receiver=True)  # type: ignore[attr-defined]
    return None


def fits(resolved: Resolved, impl: object) -> list[Finding] | None:
    """Findings on whether ``impl`` can stand in for what ``resolved`` found (None: nothing to compare).

    Errors here are exactly what the engine refuses (``core.apply.build_replacement``, through
    ``refusal_cause``); warnings it installs.
    """
    wrong = kind_problem(resolved, impl)
    if wrong is not None:
        return [Finding("error", wrong)]
    return _signature_findings(resolved, impl)


def refusal_cause(resolved: Resolved, impl: object) -> str | None:
    """The engine's check when applying (cheap: one ``inspect.signature`` each): why it refuses."""
    wrong = kind_problem(resolved, impl)
    if wrong is not None:
        return wrong
    errors = [f.message for f in _signature_findings(resolved, impl) or () if f.level == "error"]
    if not errors:
        return None
    where = f"{describe(resolved.holder)}.{resolved.name}"
    return f"the impl cannot take every call {where} takes: {'; '.join(errors)}"


# ---------------------------------------------------------------------------------- TorchScript
def torchscript_callers(original: object) -> list[str]:
    """TorchScript functions compiled already that call ``original`` (they keep calling it).

    ``torch.jit.script`` compiles a function and every Python function it calls, once, into
    its compilation unit; a patch applied later cannot reach into that code. Only asked when
    torch.jit has loaded (fl_patch never imports torch for this).
    """
    state = sys.modules.get("torch.jit._state")
    unit = getattr(state, "_python_cu", None)
    function = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    if unit is None or not isinstance(function, types.FunctionType):
        return []
    qualified = f"__torch__.{function.__module__}.{function.__qualname__}"
    try:
        if unit.find_function(qualified) is None:
            return []  # never compiled as anyone's callee
        callers = []
        for compiled in unit.get_functions():
            name = compiled.qualified_name
            if name != qualified and f"{qualified}(" in compiled.code:
                callers.append(name.removeprefix("__torch__."))
        return sorted(callers)
    except Exception:  # noqa: BLE001  (torch internals of another version: no finding, not a failure)
        return []
