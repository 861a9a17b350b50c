"""Names other modules bound to an original before it was replaced.

``from a import f`` copies the reference. A patch applied the moment ``a`` finishes
executing reaches every later importer, so only two cases leave a stale name:
modules that started loading *while* ``a`` was executing (circular imports bind
early; megatron.core has many) and, when fl_patch is activated after megatron was
imported, every module. The first case is why the hook records ``len(sys.modules)``
before a module body runs: ``sys.modules`` keeps insertion order, so the modules
inserted after that point are exactly the ones that could have bound early. The
late case sweeps everything, once per activation.

Only functions, classes and whole modules are looked for: they are unique objects,
so identity means "this name refers to the replaced thing". A constant or the name
``torch`` is never swept (``1`` or the torch module are shared by everyone).
Values are compared by identity, so ``from a import f as g`` is found too.

The other direction is recorded as modules load (``NameBindings.record_later``): a module
imported after a patch that bound the impl under the target's own name (``from
.clip_grads import get_grad_norm_fp32``), so that ``uninstall()`` puts back exactly those
names, and no name fl_patch never touched.
"""

from __future__ import annotations

import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Mapping

from fl_patch.core.patch import AppliedPatch, binding

__all__ = [
    "AliasBinding",
    "HolderIndex",
    "NameBindings",
    "Window",
    "modules_since",
    "rebind_aliases",
    "sweepable",
    "window_items",
]

AliasBinding = tuple[types.ModuleType, str, object]  # (module, name, original value)

# A window: the name of the module whose body ran (its own entry in ``sys.modules`` marks where the
# window starts: what follows it was inserted while that body ran), or None for "every module".
Window = str | None


def sweepable(original: object) -> bool:
    return isinstance(original, (types.FunctionType, type, types.ModuleType))


def window_items(anchor: str) -> list[tuple[str, object]]:
    """``(name, module)`` of the entries inserted into ``sys.modules`` after ``anchor``'s own entry.

    Found by walking back from the end to that entry: linear in the window, whatever happened
    meanwhile. (An index taken before the body would be off by every entry deleted meanwhile: a
    failed optional import deletes its entry, and more deletions than any fixed slack left early
    aliases behind.) When ``anchor`` has no entry (its body deleted it), every module is the window.
    """
    found: list[tuple[str, object]] = []
    try:
        for name in reversed(sys.modules):
            if name == anchor:
                found.reverse()
                return found
            found.append((name, sys.modules.get(name)))
    except RuntimeError:  # another thread imported meanwhile: take everything (a superset)
        pass
    return list(sys.modules.items())


def modules_since(window: Window) -> list[object]:
    """Modules inserted into ``sys.modules`` after ``window``'s entry (all of them for None)."""
    if window is None:
        return list(sys.modules.values())
    return [module for _, module in window_items(window)]


def _namespace(module: object) -> dict[str, object] | None:
    if not isinstance(module, types.ModuleType):
        return None
    # object.__getattribute__ skips a lazy module's __getattribute__/__getattr__,
    # which would otherwise import it just because we looked.
    try:
        namespace = object.__getattribute__(module, "__dict__")
    except Exception:  # noqa: BLE001  (a hostile module object must not break the sweep)
        return None
    return namespace if isinstance(namespace, dict) else None


def rebind_aliases(
    replacements: Mapping[int, tuple[object, object]],
    modules: Iterable[object],
    skip_module_names: frozenset[str],
    skip_prefixes: tuple[str, ...] = ("fl_patch.",),
    only_prefixes: tuple[str, ...] | None = None,
) -> list[AliasBinding]:
    """Point every module-level name bound to an original at its replacement.

    ``replacements`` maps ``id(original)`` to ``(original, replacement)``. Returns
    what was rebound, so ``uninstall()`` can put it back. ``only_prefixes`` limits
    the sweep to modules whose names start with one of them.
    """
    rebound: list[AliasBinding] = []
    if not replacements:
        return rebound
    for module in modules:
        namespace = _namespace(module)
        if namespace is None:
            continue
        module_name = namespace.get("__name__")
        if not isinstance(module_name, str):
            continue
        if module_name in skip_module_names or module_name.startswith(skip_prefixes):
            continue
        if only_prefixes is not None and not module_name.startswith(only_prefixes):
            continue
        for name, value in list(namespace.items()):
            entry = replacements.get(id(value))
            if entry is not None and entry[0] is value:
                namespace[name] = entry[1]
                rebound.append((module, name, value))  # type: ignore[arg-type]
    return rebound


def _swept(patch: AppliedPatch) -> bool:
    """Whether names bound to this patch's original elsewhere are rebound (and recorded).

    Not for a redirected class (its name keeps the upstream class: nothing to rebind), a proxy
    kept at the target (the proxy itself stays bound), a module, or a re-export (only the named
    place changes)."""
    original = patch.original
    holder = patch.holder
    if patch.redirected or patch.proxy is not None:
        return False
    if not isinstance(holder, types.ModuleType) or not sweepable(original):
        return False
    if isinstance(original, types.ModuleType):
        return False  # a module bound to a name (``torch``): shared, never swept
    return getattr(original, "__module__", None) == holder.__name__


class HolderIndex:
    """Which loaded modules hold each function, class or module they did not define themselves.

    A patch applied late (``register()`` after megatron loaded, a retried target, a late whole-module
    replacement) must rebind every module-level name bound to its original, anywhere. Reading every
    loaded module's namespace for each such patch cost ~70 ms per ``register()`` with megatron-core
    loaded (3,000 modules). This index is built once, at the first late patch, and after that reads
    only modules new to ``sys.modules`` (or re-imported, or still loading when last read); a late
    patch then reads the namespaces of the modules holding its original, plus the original's home
    module (which may alias it under a second name), and nothing else.

    Entries are hints, checked on use (``rebind_aliases`` compares by identity). It is read afresh at
    each activation (``install()`` with modules loaded: the one sweep of everything). What it cannot
    see: a name bound to an original *after* its module finished loading and after that (a
    function's ``global`` statement, another tool's ``setattr``), in a module it had already read.
    """

    def __init__(self) -> None:
        self._holders: dict[int, list[str]] = {}  # id(value) -> names of the modules holding it
        self._seen: dict[str, Callable[[], object]] = {}  # module name -> (a weak reference to) the object read
        self._unfinished: set[str] = set()  # read while still loading: read again once loaded
        self._mark: tuple[int, str | None, int] | None = None  # sys.modules as last seen (length, last entry)
        self.scanned = 0  # namespaces read by the last query (what a late patch costs)

    def holders(self, ids: Iterable[int]) -> set[str]:
        self.scanned = 0
        self._refresh()
        names: set[str] = set()
        for key in ids:
            names.update(self._holders.get(key, ()))
        return names

    def reset(self) -> None:
        """Forget everything: the next query reads every module again (at activation: once)."""
        self._holders.clear()
        self._seen.clear()
        self._unfinished.clear()
        self._mark = None

    def add(self, key: int, module_name: str) -> None:
        if self._mark is not None:
            self._holders.setdefault(key, []).append(module_name)

    def _refresh(self) -> None:
        modules = sys.modules
        mark = _mark_of(modules)
        for name in list(self._unfinished):
            module = modules.get(name)
            if module is None or not _still_initializing(module):
                self._unfinished.discard(name)
                if module is not None:
                    self._read(name, module)
        if mark == self._mark:
            return  # nothing inserted, deleted or replaced at the end since: no module is new
        for name, module in list(modules.items()):
            ref = self._seen.get(name)
            if ref is None or ref() is not module:
                self._read(name, module)
        self._mark = _mark_of(modules)

    def _read(self, name: str, module: object) -> None:
        try:
            self._seen[name] = weakref.ref(module)
        except TypeError:
            # (takes no weak reference: keep it; mypy cannot infer a lambda's default-argument type)
            self._seen[name] = lambda module=module: module  # type: ignore[misc]
        namespace = _namespace(module)
        if namespace is None:
            return
        self.scanned += 1
        if _still_initializing(module):
            self._unfinished.add(name)
        holders = self._holders
        for value in list(namespace.values()):
            kind = type(value)  # (never isinstance: a deprecated object's __class__ warns when asked)
            if kind is not types.FunctionType and not issubclass(kind, (type, types.ModuleType)):
                continue
            if not issubclass(kind, types.ModuleType):
                try:
                    if value.__module__ == name:
                        continue  # defined here: its own module is always read (see NameBindings.rebind)
                except Exception:  # noqa: BLE001  (a hostile class must not break the index)
                    pass
            holders.setdefault(id(value), []).append(name)


def _mark_of(modules: dict[str, types.ModuleType]) -> tuple[int, str | None, int]:  # sys.modules
    last = next(reversed(modules), None) if modules else None
    return (len(modules), last, id(modules.get(last)) if last is not None else 0)


def _still_initializing(module: object) -> bool:
    spec = getattr(module, "__spec__", None) if isinstance(module, types.ModuleType) else None
    return bool(getattr(spec, "_initializing", False))


class NameBindings:
    """The names modules hold to what fl_patch replaced: rebound on patching, recorded for undoing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id(installed) -> its patch; weak: a patch its target dropped goes with it. The plain set of
        # keys is what a module's scan tests (a WeakValueDictionary's `in` is a Python call).
        self._installed: weakref.WeakValueDictionary[int, AppliedPatch] = weakref.WeakValueDictionary()
        self._installed_ids: set[int] = set()
        self.holders = HolderIndex()
        self.scanned = 0  # module namespaces the last late sweep read (the index's, then the holders')

    def _late_modules(self, replacements: Mapping[int, tuple[object, object]]) -> list[object]:
        """The modules that may hold these originals: the index's holders and the originals' homes."""
        names = self.holders.holders(replacements)
        names.update(getattr(original, "__module__", None) or "" for original, _ in replacements.values())
        modules = [sys.modules.get(name) for name in sorted(names) if name]
        self.scanned = self.holders.scanned + len(modules)
        return [module for module in modules if module is not None]

    def rebind(self, applied: list[AppliedPatch], window: Window) -> None:
        """Point names bound to these patches' originals at the impls, in modules since ``window``."""
        replacements: dict[int, tuple[object, object]] = {}
        owners: dict[int, AppliedPatch] = {}
        skip: set[str] = set()
        for patch in applied:
            if not _swept(patch):
                continue
            replacements[id(patch.original)] = (patch.original, patch.installed)
            owners[id(patch.original)] = patch
            with self._lock:
                self._installed[id(patch.installed)] = patch
                self._installed_ids.add(id(patch.installed))
            if patch.impl_module is not None:
                skip.add(patch.impl_module)  # the impl's own module keeps the original (seed pattern)
        if not replacements:
            return
        if window is not None:
            # The modules loaded during the body, and the targets' own modules: a second name the module
            # itself binds to the original (``multi_tensor_scale_impl = local_multi_tensor_scale``) is an
            # alias like any other.
            modules = [*modules_since(window), *{id(p.holder): p.holder for p in applied if _swept(p)}.values()]
        else:
            modules = self._late_modules(replacements)
        for module, name, value in rebind_aliases(replacements, modules, frozenset(skip)):
            owners[id(value)].aliases.append(binding(module, name, value))
            self.holders.add(id(replacements[id(value)][1]), module.__name__)

    def rebind_module(self, patch: AppliedPatch, module: types.ModuleType) -> None:
        """A loaded module replaced whole: names bound to it go to the replacement."""
        impl = patch.installed
        skip = frozenset({getattr(impl, "__name__", "")})
        replacements = {id(module): (module, impl)}
        rebound = rebind_aliases(replacements, self._late_modules(replacements), skip)
        patch.aliases.extend(binding(*entry) for entry in rebound)

    def record_later(self, module: object) -> None:
        """Names ``module`` imported from a patched place (``from .clip_grads import get_grad_norm_fp32``)."""
        ids = self._installed_ids
        if not ids:
            return
        try:
            namespace = object.__getattribute__(module, "__dict__")
        except Exception:  # noqa: BLE001
            return
        installed = self._installed
        try:
            items = [(name, value) for name, value in namespace.items() if id(value) in ids]
        except RuntimeError:  # the namespace changed meanwhile (another thread): look at a copy
            items = [(name, value) for name, value in list(namespace.items()) if id(value) in ids]
        for name, value in items:
            patch = installed.get(id(value))
            if patch is None or patch.installed is not value or name != patch.name or module is patch.holder:
                continue
            if patch.impl_module is not None and patch.impl_module == namespace.get("__name__"):
                continue  # the impl's own module
            if patch.is_in_place():
                patch.later_bindings.append(binding(module, name, patch.original))

    def clear(self) -> None:
        with self._lock:
            self._installed.clear()
            self._installed_ids.clear()
