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
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable, Mapping

__all__ = ["AliasBinding", "modules_since", "rebind_aliases", "sweepable"]

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
