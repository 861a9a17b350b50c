"""Class targets: what a registered class does to the class it replaces.

Two cases, told apart by where the name stands (``strategy``):

**The class's own definition** (``megatron.core.tensor_parallel.layers.ColumnParallelLinear``:
the class object's ``__module__`` and ``__qualname__`` are that very place, and it is an ordinary
Python class). The name stays bound to the upstream class, as FlagScale's ``@overridable`` leaves it
("all places that instantiate the original class receive the replacement"):

- **instantiation** is redirected: fl_patch sets ``Name.__new__`` to a function that, when the
  class being built *is* ``Name``, builds the impl instead (the impl subclasses ``Name``, so
  Python then runs the impl's ``__init__``); an impl that defines ``__new__`` (a factory class)
  is built by that ``__new__``. Subclasses of ``Name`` build themselves as before;
- **class-level calls** reach the impl: the static and class methods the impl defines over
  upstream's are set on ``Name`` too, so ``Name.apply`` of an autograd Function bound at
  import (``bias_gelu_impl = GeLUFunction.apply``) runs the impl's ``forward``/``backward``.

Why not put the impl (or a class standing in for it) at the name: ``super(Name, self)`` in
upstream's own methods reads the module global ``Name`` when it runs. Rebound, it means the impl:
upstream's ``__init__`` called from the impl's then lands in upstream's ``__init__`` again
(RecursionError), and a subclass defined before the patch (every ``MoELayer`` of
``BaseMoELayer``) fails with ``super(type, obj)``. A new class object at the name also needs a
metaclass that keeps ``isinstance`` for upstream's instances, and that metaclass conflicts with
any other metaclass in a later class statement (``class TransformerLayer(GraphableMegatronModule,
BaseTransformerLayer)`` with ``ABCMeta``). With the name untouched, none of this can happen:
``isinstance``, ``issubclass``, pickling (instances pickle as the impl's class, by the impl's own
name), ``super`` in both classes and every reference taken at import stay what Python makes them.

**Anywhere else**: a re-export (``megatron.core.optimizer.SGD`` is ``torch.optim.SGD``) or a class
whose ``__new__`` cannot be set (a C type such as ``torch.Generator``). The target is then that
*name*: it is rebound to a stand-in, a subclass of the impl named like the target whose metaclass
also accepts the original's instances and subclasses (``isinstance(g, torch.Generator)`` holds for a
generator torch built itself). The class itself is never changed (it is torch's, not the target's).
"""

from __future__ import annotations

import inspect
import threading
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ABSENT",
    "ORIGINAL_ATTR",
    "ClassChange",
    "is_stand_in",
    "redirect",
    "redirect_in_place",
    "redirects_to",
    "stand_in_class",
    "strategy",
    "undo",
    "upstream_new",
]

ABSENT = object()  # vars(cls) had no such name
ORIGINAL_ATTR = "__fl_patch_original__"  # on a stand-in: the upstream class it stands in for
_IMPL_ATTR = "__fl_patch_impl__"  # on a stand-in: the registered impl class
_REDIRECT_ATTR = "__fl_patch_redirect__"  # on fl_patch's __new__: its _Redirect (what it builds now)


class ClassImplError(Exception):
    """The impl class cannot stand in for the target class (said with the cause)."""


@dataclass
class ClassChange:
    """One attribute fl_patch set on an upstream class: enough to put it back exactly."""

    name: str
    previous: object  # vars(cls)[name] before, or ABSENT
    installed: object


def strategy(holder: object, name: str, cls: type) -> str:
    """``"redirect"`` where ``holder.name`` is ``cls``'s own definition and its ``__new__`` can be set, else ``"rebind"``."""
    home = getattr(holder, "__name__", None) if isinstance(holder, types.ModuleType) else None
    if isinstance(holder, type):
        home, qualname = holder.__module__, f"{holder.__qualname__}.{name}"
    else:
        qualname = name
    if cls.__module__ != home or cls.__qualname__ != qualname:
        return "rebind"
    if not cls.__flags__ & _HEAPTYPE or cls.__flags__ & _IMMUTABLETYPE:
        return "rebind"
    return "redirect"


_HEAPTYPE = 1 << 9
_IMMUTABLETYPE = 1 << 8


# ---------------------------------------------------------------------------------- redirect
class _Redirect:
    """What fl_patch's ``__new__`` on one upstream class builds now (``impl``; None: the class itself).

    ``building`` holds the impl and the ``__new__`` its own classes define (None: it has none), set
    and read as one tuple, so a thread building while the patch is put or undone sees one pair.
    ``upstream_new`` is what ``Name.__new__`` ran before fl_patch set its own (set once, by
    ``_redirecting_new``); ``inner_new`` a separate patch of ``Name.__new__``, run in its place.
    """

    __slots__ = ("beneath", "beneath_new", "building", "inner_new", "upstream_new", "upstream_signature")

    def __init__(self, upstream_signature: inspect.Signature | None) -> None:
        self.building: tuple[type, Callable[..., Any] | None] | None = None
        self.upstream_new: Callable[..., Any] | None = None
        self.upstream_signature = upstream_signature
        # What stood at ``Name.__new__`` when the redirect was first set (the class's own, ABSENT: inherited), run
        # as upstream's. A patch of ``Name.__new__`` applied before the class's own patch is found here; its undo
        # puts back what it replaced (``replace_beneath``) and the class's undo restores what is here, so neither
        # leaves a copy of the impl running.
        self.beneath: object = ABSENT
        self.beneath_new: Callable[..., Any] | None = None  # ``beneath`` as a function (None: inherited)
        # A patch of ``Name.__new__`` itself, registered beside the class's (``put_inside``): what the redirect
        # calls in place of upstream's ``__new__``; None: upstream's.
        self.inner_new: Callable[..., Any] | None = None

    @property
    def impl(self) -> type | None:
        building = self.building
        return building[0] if building is not None else None

    def put_beneath(self, value: object) -> None:
        function = value.__func__ if isinstance(value, staticmethod) else value
        self.beneath, self.beneath_new = value, function if callable(function) else None

    def build(self, impl: type | None, original: type) -> None:
        self.building = (impl, _own_new(impl, original)) if impl is not None else None


def _own_new(impl: type, original: type) -> Callable[..., Any] | None:
    """The ``__new__`` Python would call for ``impl`` if ``original``'s were not fl_patch's: the first one
    defined along the impl's MRO before ``original`` (the impl's own, a mixin's), or None.

    A factory class (megatron's ``WrappedTorchNorm``: its ``__new__`` returns a torch norm, not an
    instance) is replaced by an impl that overrides ``__new__`` (docs/writing-a-plugin.md): that
    ``__new__`` is the impl, and building the impl must run it, not upstream's.
    """
    for klass in impl.__mro__:
        if klass is original:
            return None
        new = vars(klass).get("__new__")
        if new is not None:
            function = new.__func__ if isinstance(new, staticmethod) else new
            return function if callable(function) else None
    return None


def redirect(original: type, impl: type) -> tuple[list[ClassChange], list[str]]:
    """Make ``original(...)`` build ``impl`` and its class-level members the impl's; returns (changes, notes).

    ``impl`` subclasses ``original`` (checked by the caller). Nothing is changed when this raises.
    """
    members, notes = _class_level_members(original, impl)
    # (read before ours is set: an impl that defines no __init__/__new__ would show ours, (*args, **kwargs))
    impl_signature = _signature_of(impl, receiver=True)
    current = vars(original).get("__new__", ABSENT)
    state = _state_of(current)
    if state is None:
        # (read before anything is set: inspect.signature(original) reads a class's own __new__ first)
        state = _Redirect(_signature_of(original, receiver=True))
        state.put_beneath(current)
        new: object = _redirecting_new(original, state)
    else:
        new = current  # ours, left as a pass-through by an earlier undo: reused (see undo)
    changes: list[ClassChange] = []
    try:
        for name, value in [("__new__", new), *members]:
            changes.append(ClassChange(name, vars(original).get(name, ABSENT), value))
            setattr(original, name, value)
    except (AttributeError, TypeError) as exc:
        undo(original, changes)
        raise ClassImplError(f"cannot set {exc}") from None
    state.build(impl, original)
    _face(new, impl_signature)
    return changes, notes


def redirect_in_place(original: type, changes: list[ClassChange]) -> bool:
    """Whether fl_patch's redirect of this patch is still what ``original.__new__`` is, building an impl."""
    for change in changes:
        if change.name == "__new__" and vars(original).get("__new__") is change.installed:
            state = _state_of(change.installed)
            return state is not None and state.impl is not None
    return False


def redirects_to(original: type) -> type | None:
    """The impl ``original(...)`` builds now, if fl_patch redirects it."""
    state = _state_of(vars(original).get("__new__"))
    return state.impl if state is not None else None


def redirect_state_at(holder: object, name: str = "__new__") -> _Redirect | None:
    """The redirect standing at ``holder.__new__`` (building an impl, or a pass-through left by an undo), if
    ``name`` is ``__new__`` and fl_patch's redirect is there."""
    if name != "__new__" or not isinstance(holder, type):
        return None
    return _state_of(vars(holder).get("__new__"))


def put_inside(state: _Redirect, function: Callable[..., Any]) -> Callable[..., Any] | None:
    """A patch of ``Name.__new__`` where the class's own patch has its redirect (``state``): the redirect runs
    ``function`` where it ran upstream's ``__new__`` (for upstream's class, and for the impl's call of upstream's
    ``__new__``). Setting ``function`` at the name instead would remove the redirect: ``Name(...)`` would build
    upstream's class again while both patches are reported applied. Returns what was inside before (None)."""
    previous, state.inner_new = state.inner_new, function
    return previous


def inside(holder: object) -> Callable[..., Any] | None:
    """The ``__new__`` patch inside the redirect at ``holder.__new__`` (None: none, or no redirect)."""
    state = redirect_state_at(holder)
    return state.inner_new if state is not None else None


def take_out(holder: object, function: object, previous: Callable[..., Any] | None) -> bool:
    """Undo ``put_inside`` where ``function`` is still inside; whether it was."""
    state = redirect_state_at(holder)
    if state is None or state.inner_new is not function:
        return False
    state.inner_new = previous
    return True


def beneath(holder: object) -> object:
    """What the redirect at ``holder.__new__`` runs as upstream's ``__new__`` (ABSENT: none, or no redirect)."""
    state = redirect_state_at(holder)
    return state.beneath if state is not None else ABSENT


def replace_beneath(holder: object, installed: object, previous: object) -> bool:
    """Undo a ``Name.__new__`` patch (``installed``) that a later class patch's redirect found at the name and runs
    as upstream's: the redirect runs ``previous`` (what the patch replaced) instead. Whether it was there."""
    state = redirect_state_at(holder)
    if state is None or state.beneath is not installed:
        return False
    state.put_beneath(previous)
    return True


def upstream_new(original: type) -> Callable[..., Any]:
    """What ``original.__new__`` ran before fl_patch redirected it, called as ``f(cls, *args, **kwargs)``.

    For a caller that needs upstream's own construction while the patch is in place (compare mode
    builds upstream's module next to the impl's): ``original.__new__(original, ...)`` now builds the impl.
    """
    state = _state_of(vars(original).get("__new__"))
    if state is not None and state.upstream_new is not None:
        return state.upstream_new
    return original.__new__


def undo(original: type, changes: list[ClassChange]) -> None:
    """Put back what ``changes`` replaced, where fl_patch's value is still there (newest first).

    ``__new__`` that the class did not define itself is not deleted but left as a pass-through: once
    a class has had a ``__new__``, CPython keeps calling through that slot after it is deleted, and
    ``object.__new__`` then refuses the constructor's arguments ("takes exactly one argument"). The
    pass-through calls what the class inherits, exactly as the class did before; the next redirect of
    the class reuses it.
    """
    for change in reversed(changes):
        current = vars(original).get(change.name, ABSENT)
        if current is not change.installed:
            continue  # someone else's value over ours: not ours to undo
        state = _state_of(current) if change.name == "__new__" else None
        previous = change.previous
        if state is not None and previous is not current:
            previous = state.beneath  # (a __new__ patch beneath may have been undone since: what it put back)
        # Left as a pass-through also while a patch of Name.__new__ is inside it: putting the class's own __new__
        # back would drop that patch silently.
        if state is not None and (previous is ABSENT or previous is current or state.inner_new is not None):
            state.build(None, original)
            _face(current, state.upstream_signature)
            continue
        if previous is ABSENT:
            delattr(original, change.name)
        else:
            setattr(original, change.name, previous)


def _state_of(new: object) -> _Redirect | None:
    function = new.__func__ if isinstance(new, staticmethod) else new
    state = getattr(function, _REDIRECT_ATTR, None)
    return state if isinstance(state, _Redirect) else None


def _face(new: object, signature: inspect.Signature | None) -> None:
    """``inspect.signature(Name)`` reads a class's own ``__new__`` first: it shows what ``Name(...)`` takes."""
    function = new.__func__ if isinstance(new, staticmethod) else new
    if signature is not None:
        function.__signature__ = signature  # type: ignore[attr-defined]
    else:
        vars(function).pop("__signature__", None)


def _redirecting_new(original: type, state: _Redirect) -> staticmethod:
    object_new = object.__new__

    def upstream(cls: type, *args: Any, **kwargs: Any) -> Any:
        # What the class's __new__ did before: its own, or the one it inherits
        inner = state.inner_new
        if inner is not None:  # a patch of Name.__new__ itself, put inside this redirect (put_inside)
            return inner(cls, *args, **kwargs)
        return upstream_own(cls, *args, **kwargs)

    def upstream_own(cls: type, *args: Any, **kwargs: Any) -> Any:
        own_new = state.beneath_new  # (read at each call: replace_beneath may change it)
        if own_new is not None:
            return own_new(cls, *args, **kwargs)
        following = super(original, cls).__new__  # type: ignore[arg-type]  # (original is a class: mypy reads it as a value)
        if following is object_new:
            # object.__new__ refuses extra arguments once a class defines __new__ (this one does)
            return following(cls)
        return following(cls, *args, **kwargs)

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls is original:
            building = state.building
            if building is not None:
                impl, impl_new = building
                if impl_new is not None:
                    # The impl's own __new__ (a factory's); its call of upstream's (``Name.__new__(cls, ...)``
                    # or ``super().__new__``) comes back here with cls the impl, and runs upstream's below.
                    return impl_new(impl, *args, **kwargs)
                cls = impl
        return upstream(cls, *args, **kwargs)

    __new__.__qualname__ = f"{original.__qualname__}.__new__"
    __new__.__module__ = original.__module__
    for helper in (upstream, upstream_own):
        helper.__qualname__ = __new__.__qualname__
        helper.__module__ = original.__module__
    state.upstream_new = upstream_own  # upstream's alone (compare mode builds upstream's module with it)
    setattr(__new__, _REDIRECT_ATTR, state)
    return staticmethod(__new__)


def _signature_of(cls: type, *, receiver: bool) -> inspect.Signature | None:
    """``inspect.signature(cls)``, with a leading ``cls`` parameter (as a ``__new__`` has) when ``receiver``."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return None
    if not receiver:
        return signature
    name = "cls"
    while name in signature.parameters:  # (BlendedMegatronDatasetBuilder.__init__ has a parameter named cls)
        name = f"_{name}"
    first = inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY)
    return signature.replace(parameters=[first, *signature.parameters.values()])


def _class_level_members(original: type, impl: type) -> tuple[list[tuple[str, object]], list[str]]:
    """The static and class methods the impl defines over upstream's, to set on ``original``.

    Read along the impl's MRO down to ``original`` (an intermediate class of the impl counts as
    the impl's). Dunders are left alone (``__init_subclass__``, ``__class_getitem__``: how Python
    builds classes, not what callers call). A classmethod whose body uses ``super()`` or
    ``__class__`` is left on the impl (said in the notes): set on ``original``, its
    ``super(Impl, cls)`` would be given ``original`` and fail.
    """
    members: list[tuple[str, object]] = []
    notes: list[str] = []
    seen: set[str] = set()
    for klass in impl.__mro__:
        if klass is original or original not in klass.__mro__:  # (issubclass() raises for a Protocol)
            break
        for name, value in list(vars(klass).items()):
            if name in seen:
                continue
            seen.add(name)
            if name.startswith("__") and name.endswith("__"):
                continue
            if not isinstance(value, (staticmethod, classmethod)):
                continue
            if _upstream_raw(original, name) is value:
                continue
            if isinstance(value, classmethod) and _uses_class_cell(value.__func__):
                notes.append(
                    f"classmethod {name} uses super(): it runs for the impl's instances and {impl.__qualname__}.{name}, "
                    f"not through {original.__qualname__}.{name}"
                )
                continue
            members.append((name, value))
    return members, notes


def _upstream_raw(cls: type, name: str) -> object:
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return ABSENT


def _uses_class_cell(function: object) -> bool:
    code = getattr(function, "__code__", None)
    return code is not None and "__class__" in code.co_freevars


# ---------------------------------------------------------------------------------- stand-ins (rebind)
# One stand-in metaclass per metaclass of an impl (type, ABCMeta, a library's own).
_METAS: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()
_CHECKING = threading.local()


def _own(cls: type, name: str) -> object:
    # Only the stand-in's own entry: a class that subclasses the stand-in later is an
    # ordinary class (its checks are the usual ones).
    return type.__dict__["__dict__"].__get__(cls).get(name)


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
    """fl_patch's class to put at ``holder.name`` for ``impl`` (a subclass of ``original``), for the rebind case.

    Named and placed like the target (``__module__``/``__qualname__`` of where it is
    installed), so pickle finds it by that name; ``__slots__ = ()`` so its instances are laid
    out exactly as the impl's. Raises ``ClassImplError`` when the impl's class machinery refuses
    a subclass (``__init_subclass__`` that needs arguments, ...).
    """
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
        raise ClassImplError(
            f"cannot build the class that keeps isinstance/issubclass of the original "
            f"(a subclass of {impl.__module__}.{impl.__qualname__}): {type(exc).__name__}: {exc}"
        ) from None
