"""What an impl must be to stand in for its target, by the kind of the target: one decision, one place.

The engine (``engine.applier``) and ``--check`` (``diagnostics.check``) both call ``decide``, so a
registration the engine refuses is an error in ``--check`` with the same words, and one
``--check`` calls ok is one the engine installs, with the same adaptations.

- **Class targets**: the impl must be a class that subclasses the target class (how it then takes
  the target's place is ``core.classes``).
- **Wrapper kinds** (``WRAPPERS``). A target wrapped by ``functools.lru_cache``,
  ``singledispatch``, ``singledispatchmethod`` or ``cached_property`` has callers that use the
  wrapper's API (megatron calls ``self.forward.cache_clear()`` on ``YarnRotaryEmbedding``). The
  replacement keeps that kind: a plain impl is wrapped the same way (same ``maxsize``/``typed``;
  a fresh ``cached_property`` given its name), an impl of that kind is used as it is, and where no
  wrapping keeps the meaning (``singledispatch``: which overloads would still run?) a plain impl is
  refused.
- **Wrong kinds** (``refusal``): an impl that would drop or add the receiver (a staticmethod,
  classmethod, property or class for a method; a classmethod for a function; ...) is refused,
  and so is one whose signature cannot take every call the target takes
  (``core.signatures.compare`` errors). A parameter the impl merely *names* differently is no
  reason to refuse: the decision carries the renames, and the engine passes keyword calls on.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fl_patch.core.resolve import Kind, Resolved, describe
from fl_patch.core.signatures import Comparison, Finding, compare

__all__ = [
    "Decision",
    "Wrapper",
    "decide",
    "fits",
    "kind_problem",
    "prefixed",
    "read_signature",
    "refusal",
    "rewrap",
    "torchscript_callers",
    "wrapper_of",
]


class KindMismatch(Exception):
    """Raised by ``rewrap``: the impl is not of the target's wrapper kind and cannot be made one."""


@dataclass(frozen=True)
class Decision:
    """Whether ``impl`` may stand in for the target, and how: one answer for the engine and ``--check``."""

    refusal: str | None  # why it is refused (None: it is applied)
    renames: dict[str, str] = field(default_factory=dict)  # keyword calls the engine passes on (core.signatures)
    findings: list[Finding] = field(default_factory=list)  # everything said about it (errors, warnings, notes)
    compared: bool = True  # False: nothing could be compared (a C function's signature, a module)


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
    """(whether the target is a wrapper kind, the replacement for it); raises KindMismatch."""
    wrapper = wrapper_of(resolved.raw)
    if wrapper is None:
        return False, impl
    if wrapper.detect(impl) and wrapper.wrap is not _wrap_cached_property:
        return True, impl  # already that kind, with its API
    if wrapper.wrap is None:
        raise KindMismatch(
            f"the target is a {wrapper.name} (callers use its .{', .'.join(wrapper.api)}); "
            f"the impl must be one too (it is a {_kind_name(impl)})"
        )
    own_kind = isinstance(impl, functools.cached_property) and wrapper.wrap is _wrap_cached_property
    if not own_kind and (isinstance(impl, _DESCRIPTORS) or not callable(impl)):
        raise KindMismatch(f"the target is a {wrapper.name}, the impl a {_kind_name(impl)}")
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


def _compare(target: object, impl: object, *, receiver: bool) -> Comparison | None:
    """None when the target's signature cannot be read (a C function: nothing to compare)."""
    t_sig, _ = read_signature(target, "target")
    if t_sig is None:
        return None
    i_sig, i_problem = read_signature(impl, "impl")
    if i_sig is None:
        return Comparison([i_problem] if i_problem is not None else [], {})
    return compare(t_sig, i_sig, receiver=receiver)


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
        if typing.is_typeddict(raw):
            # (its "subclass" has bases (dict,): no class to redirect; calling the name gives a plain dict)
            return "the target is a TypedDict: its instances are plain dicts, so no class can replace it"
        # Read off the MRO, not issubclass(): a Protocol that is not runtime_checkable, or a TypedDict,
        # raises on issubclass() instead of answering (megatron has 33 Protocols and a TypedDict).
        if raw not in impl.__mro__:
            return (
                f"replacement class {impl.__module__}.{impl.__qualname__} does not subclass "
                f"{raw.__module__}.{raw.__qualname__}, so isinstance checks against the original would fail"  # type: ignore[attr-defined]
            )
        return None
    if wrapper_of(raw) is not None:
        try:
            rewrap(resolved, impl)
        except KindMismatch as exc:
            return str(exc)
        return None
    return refusal(resolved, impl)


def _signature_comparison(resolved: Resolved, impl: object) -> Comparison | None:
    raw = resolved.raw
    kind = resolved.kind
    plain = impl.__func__ if isinstance(impl, (staticmethod, classmethod)) else impl
    if kind is Kind.CLASS:
        constructor = _compare(raw, impl, receiver=False)
        if constructor is None:
            return None
        # A class is built with the impl's own signature: nothing is renamed for it.
        return Comparison([prefixed(f, "constructor: ") for f in constructor.findings if f.level != "note"], {})
    wrapper = wrapper_of(raw)
    if wrapper is not None:
        if wrapper.wrap is None:
            return None  # the impl is of the target's own kind: its signature is its own affair
        inner = raw.func if isinstance(raw, functools.cached_property) else raw
        theirs = impl.func if isinstance(impl, functools.cached_property) else impl
        found = _compare(inner, theirs, receiver=isinstance(resolved.holder, type))
        # (fl_patch wraps the impl in the target's own wrapper kind: no adapter goes in between)
        return None if found is None else Comparison([f for f in found.findings if f.level != "note"], {})
    if kind in (Kind.MODULE, Kind.ATTRIBUTE):
        if kind is Kind.ATTRIBUTE and raw is not None and not isinstance(impl, type(raw)):
            message = f"the target is of type {type(raw).__name__}, the impl of type {type(impl).__name__}"
            return Comparison([Finding("warning", message)], {})
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
        found = _compare(raw.fget, getter, receiver=True)  # type: ignore[attr-defined]
        return None if found is None else Comparison([f for f in found.findings if f.level != "note"], {})
    return None


def decide(resolved: Resolved, impl: object) -> Decision:
    """Whether the engine applies ``impl`` at what ``resolved`` found, and how (cheap: one
    ``inspect.signature`` each side). ``--check`` reports exactly this."""
    wrong = kind_problem(resolved, impl)
    if wrong is not None:
        return Decision(wrong, findings=[Finding("error", wrong)])
    comparison = _signature_comparison(resolved, impl)
    if comparison is None:
        return Decision(None, compared=False)
    errors = [f.message for f in comparison.findings if f.level == "error"]
    if errors:
        cause = f"the impl cannot take every call of {_dotted(resolved)}(): {'; '.join(errors)}"
        return Decision(cause, findings=comparison.findings)
    return Decision(None, renames=comparison.renames, findings=comparison.findings)


def _dotted(resolved: Resolved) -> str:
    holder = resolved.holder
    if isinstance(holder, type):
        return f"{holder.__module__}.{holder.__qualname__}.{resolved.name}"
    return f"{getattr(holder, '__name__', describe(holder))}.{resolved.name}"


def fits(resolved: Resolved, impl: object) -> list[Finding] | None:
    """``decide``'s findings (None: nothing could be compared), for ``--check``."""
    decision = decide(resolved, impl)
    if not decision.compared:
        return None
    return decision.findings


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
