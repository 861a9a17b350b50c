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
from collections.abc import Iterable, Mapping

from fl_patch.core.apply import AppliedPatch, binding

__all__ = ["AliasBinding", "NameBindings", "modules_since", "rebind_aliases", "sweepable"]

# How far before the recorded index to start: entries deleted from sys.modules
# while the module body ran (a failed optional import) shift later entries down.
_SLACK = 32

AliasBinding = tuple[types.ModuleType, str, object]  # (module, name, original value)


def sweepable(original: object) -> bool:
    return isinstance(original, (types.FunctionType, type, types.ModuleType))


def modules_since(index: int | None) -> list[object]:
    """Modules inserted into ``sys.modules`` at or after ``index`` (all of them for None)."""
    values = list(sys.modules.values())
    if index is None:
        return values
    return values[max(0, index - _SLACK) :]


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
    """Whether names bound to this patch's original elsewhere are rebound (and recorded)."""
    original = patch.original
    holder = patch.holder
    if not isinstance(holder, types.ModuleType) or not sweepable(original):
        return False
    if isinstance(original, types.ModuleType):
        return False  # a module bound to a name (``torch``): shared, never swept
    return getattr(original, "__module__", None) == holder.__name__  # else a re-export: only the named place changes


def _impl_module(patch: AppliedPatch) -> str | None:
    """The module of the impl behind a patch (whose own names to the original are kept).

    fl_patch's own objects (a class stand-in, a shared impl's copy) are named where they are
    installed: their ``__module__`` is the target's module, whose re-exports must be rebound like
    any other module's; the impl is the registration's, or the stand-in's base class.
    """
    installed = patch.installed
    module = getattr(installed, "__module__", None)
    holder = patch.holder
    if isinstance(module, str) and module == getattr(holder, "__name__", None) and not patch.whole_module:
        if isinstance(installed, type) and len(installed.__mro__) > 1:
            module = getattr(installed.__mro__[1], "__module__", None)
        elif patch.registration is not None and isinstance(patch.registration.impl, str):
            module = patch.registration.impl.rpartition(".")[0] or None
        else:
            return None
    return module if isinstance(module, str) else None


class NameBindings:
    """The names modules hold to what fl_patch replaced: rebound on patching, recorded for undoing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id(installed) -> its patch; weak: a patch its target dropped goes with it. The plain set of
        # keys is what a module's scan tests (a WeakValueDictionary's `in` is a Python call).
        self._installed: weakref.WeakValueDictionary[int, AppliedPatch] = weakref.WeakValueDictionary()
        self._installed_ids: set[int] = set()

    def rebind(self, applied: list[AppliedPatch], window: int | None) -> None:
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
            impl_module = _impl_module(patch)
            if impl_module is not None:
                skip.add(impl_module)  # the impl's own module keeps the original (seed pattern)
        if not replacements:
            return
        for module, name, value in rebind_aliases(replacements, modules_since(window), frozenset(skip)):
            owners[id(value)].aliases.append(binding(module, name, value))

    def rebind_module(self, patch: AppliedPatch, module: types.ModuleType) -> None:
        """A loaded module replaced whole: names bound to it go to the replacement."""
        impl = patch.installed
        skip = frozenset({getattr(impl, "__name__", "")})
        rebound = rebind_aliases({id(module): (module, impl)}, modules_since(None), skip)
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
            if getattr(value, "__module__", None) == namespace.get("__name__"):
                continue  # the impl's own module
            if patch.is_in_place():
                patch.later_bindings.append(binding(module, name, patch.original))

    def clear(self) -> None:
        with self._lock:
            self._installed.clear()
            self._installed_ids.clear()
