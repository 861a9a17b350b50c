"""What other threads see, and what an impl can reach, while fl_patch runs plugin code inside an import.

fl_patch imports impls (and the deferred registry sources) *inside* the import of a target
module: after its body ran, before its importer gets it. At that moment importlib still marks
the target module, and every module this thread is loading around it, as initializing
(``module.__spec__._initializing``) and holds their module locks. Two things follow that plain
python never shows, because plain python never runs plugin code there:

- **a hang**: an impl that at its import starts a worker thread which imports the target (or
  a parent package, or a module importing it) and joins it. CPython's ``_find_and_load`` makes
  a thread importing a module found in ``sys.modules`` wait on its module lock only while
  ``__spec__._initializing`` is true; this thread holds that lock and waits for the worker;
  the import system's deadlock detection sees no cycle (a join is not a module lock).
- **unreachable names**: ``import a.b.c.d`` inside the impl makes ``a.b.c.d`` reachable only
  through the package attributes, and importlib sets ``a.b`` on ``a`` only after ``a.b`` has
  finished loading; an ancestor still loading in this thread has none yet.

``plugin_window()`` is the one place both are handled, entered around every plugin import
(``core.target.Target._import_impl``, the engine's deferred sources):

- every module this thread is loading (read off importlib's own ``_load_unlocked`` frames, so
  user modules and unwatched ones count too) is linked to its parent package, as it will be
  once loaded; links it made are taken out again at the end if that module is still loading
  (were its import to fail, plain python leaves no attribute behind);
- those modules' specs answer ``_initializing`` false to threads *started during the window*
  (the impl's workers), which then take the module as it is instead of waiting for a lock
  this thread will not release until they finish. Threads that existed before keep waiting,
  as in plain python, and get the patched module. The spec's class is swapped for the
  window (``_TrackedSpec``, a ``ModuleSpec`` subclass whose ``_initializing`` is a property
  over the same instance attribute) and put back after.

The same property tells the engine when a module that loads past the hook finishes
(``when_loaded``): importlib sets ``_initializing = False`` right after the body ran, before
the importer gets the module; that is where registrations made while it was importing apply.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.machinery import ModuleSpec

__all__ = ["after_fork_in_child", "loading_here", "plugin_window", "when_loaded"]

_BOOTSTRAP = "<frozen importlib._bootstrap>"


class _State:
    __slots__ = ("existing", "on_loaded", "opened")

    def __init__(self) -> None:
        self.opened = 0  # nesting depth of plugin windows over this spec
        self.existing: frozenset[threading.Thread] | None = None  # threads alive when the first window opened
        self.on_loaded: list[Callable[[], None]] = []


_LOCK = threading.Lock()
_STATES: dict[int, tuple[ModuleSpec, _State]] = {}  # id(spec) -> (spec, state), while its class is swapped


def after_fork_in_child() -> None:
    """A new lock in a forked child (``runtime.py`` calls this): one held at fork time stays held there."""
    global _LOCK
    _LOCK = threading.Lock()


class _TrackedSpec(ModuleSpec):
    """A spec fl_patch watches for a while; ``_initializing`` is the same instance attribute."""

    @property
    def _initializing(self) -> bool:
        value = bool(self.__dict__.get("_initializing", False))
        if not value:
            return False
        entry = _STATES.get(id(self))
        if entry is None or entry[0] is not self:
            return value
        existing = entry[1].existing
        if existing is not None and threading.current_thread() not in existing:
            return False  # a thread the plugin started: never wait for a lock held while we wait for it
        return value

    @_initializing.setter
    def _initializing(self, value: bool) -> None:
        self.__dict__["_initializing"] = value
        if not value:
            _loaded(self)


# Named as the class it stands in for: a spec's repr shows its class name.
_TrackedSpec.__name__ = _TrackedSpec.__qualname__ = "ModuleSpec"


def _track(spec: object) -> _State | None:
    """The state of ``spec``, swapping its class in (None when it is not a plain ``ModuleSpec``)."""
    with _LOCK:
        entry = _STATES.get(id(spec))
        if entry is not None and entry[0] is spec:
            return entry[1]
        if type(spec) is not ModuleSpec:
            return None  # a library's own spec class: not ours to change
        state = _State()
        _STATES[id(spec)] = (spec, state)
        spec.__class__ = _TrackedSpec
        return state


def _untrack_if_idle(spec: ModuleSpec) -> None:
    with _LOCK:
        entry = _STATES.get(id(spec))
        if entry is None or entry[0] is not spec:
            return
        state = entry[1]
        if state.opened == 0 and not state.on_loaded:
            del _STATES[id(spec)]
            spec.__class__ = ModuleSpec


def _loaded(spec: ModuleSpec) -> None:
    with _LOCK:
        entry = _STATES.get(id(spec))
        callbacks: list[Callable[[], None]] = []
        if entry is not None and entry[0] is spec:
            callbacks, entry[1].on_loaded = entry[1].on_loaded, []
    _untrack_if_idle(spec)
    for callback in callbacks:
        callback()


def loading_here() -> list[tuple[str, ModuleSpec]]:
    """(name, spec) of every module this thread is loading right now, outermost first.

    Read off importlib's ``_load_unlocked`` frames: it sets ``_initializing`` and runs the body,
    so its frames are exactly the imports in progress in this thread, whoever loads them.
    """
    found: list[tuple[str, ModuleSpec]] = []
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_load_unlocked" and code.co_filename == _BOOTSTRAP:
            spec = frame.f_locals.get("spec")
            name = getattr(spec, "name", None)
            if isinstance(spec, ModuleSpec) and isinstance(name, str) and spec.__dict__.get("_initializing"):
                found.append((name, spec))
        frame = frame.f_back
    found.reverse()
    return found


def _specs_of(name: str, spec: ModuleSpec) -> list[ModuleSpec]:
    # The import system asks the spec of the object in sys.modules, which a body may have
    # replaced (sys.modules[__name__] = ..., a whole-module replacement's own spec).
    specs = [spec]
    current = getattr(sys.modules.get(name), "__spec__", None)
    if isinstance(current, ModuleSpec) and current is not spec and current.__dict__.get("_initializing"):
        specs.append(current)
    return specs


@contextmanager
def plugin_window() -> Iterator[None]:
    """Run plugin code (an impl's import, a registry source) inside an import: see the module doc."""
    loading = loading_here()
    if not loading:
        yield
        return
    links = _link_chain(loading)
    opened: list[ModuleSpec] = []
    alive = frozenset(threading.enumerate())
    for name, spec in loading:
        for each in _specs_of(name, spec):
            state = _track(each)
            if state is None:
                continue
            with _LOCK:
                state.opened += 1
                if state.existing is None:
                    state.existing = alive
            opened.append(each)
    try:
        yield
    finally:
        for spec in opened:
            entry = _STATES.get(id(spec))
            if entry is not None and entry[0] is spec:
                with _LOCK:
                    entry[1].opened -= 1
                    if entry[1].opened == 0:
                        entry[1].existing = None
            _untrack_if_idle(spec)
        _unlink(links)


_Link = tuple[types.ModuleType, str, types.ModuleType, ModuleSpec]


def _link_chain(loading: list[tuple[str, ModuleSpec]]) -> list[_Link]:
    """Set each module being loaded here on its parent package, where the attribute is absent."""
    links: list[_Link] = []
    for name, spec in loading:
        parent_name, _, child = name.rpartition(".")
        if not parent_name:
            continue
        parent = sys.modules.get(parent_name)
        module = sys.modules.get(name)
        if not isinstance(parent, types.ModuleType) or module is None:
            continue
        namespace = parent.__dict__
        if child in namespace:
            continue  # linked already, or the package defines that name itself: not ours to change
        try:
            setattr(parent, child, module)
        except (AttributeError, TypeError):
            continue
        links.append((parent, child, module, spec))
    return links


def _unlink(links: list[_Link]) -> None:
    for parent, child, module, spec in reversed(links):
        if not spec.__dict__.get("_initializing"):
            continue  # it finished loading meanwhile: importlib's own link is the same
        if parent.__dict__.get(child) is module:
            try:
                delattr(parent, child)
            except (AttributeError, TypeError):
                pass


def when_loaded(module: types.ModuleType, callback: Callable[[], None]) -> bool:
    """Call ``callback()`` in the importing thread right after ``module``'s body ran (before its
    importer gets it); False when that cannot be followed (then the caller must say so)."""
    spec = getattr(module, "__spec__", None)
    if not isinstance(spec, ModuleSpec) or not spec.__dict__.get("_initializing"):
        return False
    state = _track(spec)
    if state is None:
        return False
    with _LOCK:
        state.on_loaded.append(callback)
    if not spec.__dict__.get("_initializing"):
        # It finished while we attached: run it here, unless the setter took it meanwhile.
        with _LOCK:
            pending = callback in state.on_loaded
            if pending:
                state.on_loaded.remove(callback)
        _untrack_if_idle(spec)
        if pending:
            callback()
    return True
