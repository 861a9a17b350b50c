"""A FlagScale plugin tree, unchanged: FlagScale's Megatron-LM-FL ``megatron/plugin/``, or one laid out like it.

**Found** as ``megatron/plugin/override_registry.py`` (Megatron-LM-FL's tree) and/or
``megatron/plugin_flagscale/override_registry.py`` (FlagScale's own side: its
``megatron.training`` targets) in a ``sys.path`` entry the user put
there (``PYTHONPATH``, site-packages, the program's own ``sys.path`` edits), never one that is
there only because Python puts the current directory or the script's directory first;
``FL_PATCH_FLAGSCALE=1`` names those too. A tree found only there is not loaded, and
that is said once on stderr with how to use it. ``megatron`` is a namespace package shared
with megatron-core.

**Its registrations reach fl_patch** whatever its ``decorators.py``:

- a tree without one gets fl_patch's (``flagscale_compat``, served under that name);
- a tree with its own (FlagScale's real tree) keeps it: that module loads as it is, so
  the internal API its own tests use (``_plugin_registry``, ``_lazy_registry``,
  ``overridable``, ``get_override_method``...) works as it always did, and right after its
  body runs, before ``override_registry`` binds the name, its ``register`` is wrapped
  (``flagscale_compat.take_over``): each call fills the tree's own registry and fl_patch's.
  Reading the tree's registry afterwards would not do: it keeps only FlagScale's short
  keys (``random._set_cuda_rng_state``), not the targets.

Loaded before fl_patch was installed, the tree's ``register`` is wrapped then and
``override_registry`` runs again (its calls are idempotent for the tree's own tables).

**Its platform detection names the vendor**, where the tree has ``megatron/plugin/platform``
(FlagScale's ``get_platform()``: ``XPU=1`` means ``kunlunxin``, Enflame is ``gcu``...): it
is asked before fl_patch's own detection, which knows only torch's devices (fl_patch's
``xpu`` is Intel's ``torch.xpu``). FlagScale's selection prints to stdout; fl_patch sends
those lines to stderr. Note that the tree's NPU platform, when selected, patches torch
globally, as it does in FlagScale itself.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fl_patch.core.errors import ProblemSink
    from fl_patch.core.registry import Registry
    from fl_patch.engine.engine import Engine

__all__ = [
    "DECORATORS",
    "FLAGSCALE_SIDE_REGISTRY",
    "REGISTRY_MODULE",
    "REGISTRY_MODULES",
    "Tree",
    "find_tree",
    "load_tree",
    "take_over_on_load",
    "tree_platform",
]

REGISTRY_MODULE = "megatron.plugin.override_registry"
# FlagScale's own side (``flagscale/train/megatron/plugin_flagscale``: its megatron.training
# targets), a portion of the same ``megatron`` namespace; it registers through the tree's
# ``megatron.plugin.decorators`` (or the one fl_patch serves) like the Megatron-LM-FL tree.
FLAGSCALE_SIDE_REGISTRY = "megatron.plugin_flagscale.override_registry"
REGISTRY_MODULES = (REGISTRY_MODULE, FLAGSCALE_SIDE_REGISTRY)
DECORATORS = "megatron.plugin.decorators"
PLATFORM_MANAGER = "megatron.plugin.platform.platform_manager"


@dataclass(frozen=True)
class Tree:
    """Where a FlagScale tree's parts are (each spec None when the tree lacks that part)."""

    plugin_dirs: tuple[str, ...]  # megatron/plugin (and megatron/plugin_flagscale) directories
    registries: tuple[tuple[str, importlib.machinery.ModuleSpec], ...]  # (module name, spec), in load order
    decorators: importlib.machinery.ModuleSpec | None
    platform: importlib.machinery.ModuleSpec | None
    regular_package: str | None  # a megatron/__init__.py in the tree, which hides megatron-core


def _implicit_entries() -> set[str]:
    """The directories Python itself put on ``sys.path`` for this program: the current directory
    (``-m``, ``-c``, the REPL) and the script's directory (``python dir/train.py``)."""
    implicit = {os.path.realpath(os.getcwd())}
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    if isinstance(script, str) and script:
        implicit.add(os.path.realpath(os.path.dirname(os.path.abspath(script))))
    return implicit


def _named_path_entries(*, anywhere: bool = False) -> list[str]:
    """sys.path entries someone named: ``PYTHONPATH``, site-packages, ``.pth`` files, the program's own
    ``sys.path`` edits; not those present only because Python puts the current directory or the
    script's directory there (``anywhere``: those too, as ``FL_PATCH_FLAGSCALE=1`` asks).

    A tree is code that replaces megatron's: one that runs because it sits next to a script or
    in the directory a job was started from (a checkout, a download, a shared scratch
    directory) runs although nobody asked for it (docs/reliability.md, blast radius).
    """
    named = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    implicit = set() if anywhere else _implicit_entries() - named
    cwd = os.getcwd()
    entries = []
    for entry in sys.path:
        absolute = os.path.abspath(entry) if entry else cwd
        if os.path.realpath(absolute) in implicit:
            continue
        entries.append(absolute)
    return entries


def _asked_for_anywhere() -> bool:
    from fl_patch.config.settings import ENV

    return os.environ.get(ENV.FLAGSCALE, "").strip().lower() in ("1", "true", "yes", "on")


def find_tree(*, anywhere: bool | None = None) -> Tree | None:
    """The tree on a named ``sys.path`` entry (``anywhere``: on any; None: as ``FL_PATCH_FLAGSCALE`` says)."""
    if anywhere is None:
        anywhere = _asked_for_anywhere()
    megatron = sys.modules.get("megatron")
    if megatron is not None:
        search = list(getattr(megatron, "__path__", []) or [])
    else:  # --list runs before any megatron import: ask where the namespace package would be
        spec = importlib.machinery.PathFinder.find_spec("megatron")
        search = list(spec.submodule_search_locations or []) if spec is not None else []
    allowed = _named_path_entries(anywhere=anywhere)
    roots = [p for p in search if os.path.dirname(os.path.abspath(p)) in allowed]
    if not roots:
        return None
    try:
        plugin = importlib.machinery.PathFinder.find_spec("megatron.plugin", roots)
        dirs = list(plugin.submodule_search_locations or []) if plugin is not None else []
        side = importlib.machinery.PathFinder.find_spec("megatron.plugin_flagscale", roots)
        side_dirs = list(side.submodule_search_locations or []) if side is not None else []
        registries = []
        for name, where in ((REGISTRY_MODULE, dirs), (FLAGSCALE_SIDE_REGISTRY, side_dirs)):
            spec = importlib.machinery.PathFinder.find_spec(name, where) if where else None
            if spec is not None:
                registries.append((name, spec))
        if not registries:
            return None
        decorators = importlib.machinery.PathFinder.find_spec(DECORATORS, dirs) if dirs else None
        platform = importlib.machinery.PathFinder.find_spec("megatron.plugin.platform", dirs) if dirs else None
    except (ImportError, ValueError):
        return None
    regular = next((r for r in roots if os.path.isfile(os.path.join(r, "__init__.py"))), None)
    return Tree(tuple(dirs + side_dirs), tuple(registries), decorators, platform, regular)


def take_over_on_load(module: types.ModuleType) -> None:
    """The engine's on-load hook for ``megatron.plugin.decorators``: wrap a real tree's ``register``."""
    from fl_patch.compat.flagscale import decorators as flagscale_compat

    if module is not flagscale_compat and hasattr(module, "register"):
        flagscale_compat.take_over(module)


def load_tree(registry: Registry, problems: ProblemSink, engine: Engine, *, hooked: bool) -> str | None:
    """Load the tree's registrations into ``registry``; returns the registry module's name if loaded.

    ``hooked``: the import hook is installed (its on-load hook wraps the tree's ``register``
    as the module loads); without it (``--list``) the module is loaded and wrapped here.
    """
    from fl_patch.compat.flagscale import decorators as flagscale_compat
    from fl_patch.sources import import_source

    tree = find_tree()
    if tree is None:
        _say_not_used(find_tree(anywhere=True))
        return None
    if tree.regular_package is not None:
        problems.problem(
            f"fl_patch: the plugin tree's {os.path.join(tree.regular_package, '__init__.py')} makes `megatron` a "
            "regular package, which hides the installed megatron-core (megatron.core, megatron.training): "
            "delete that file, so that `megatron` stays the namespace package both share"
        )
        return None
    if tree.decorators is None:
        if DECORATORS not in sys.modules:  # the hook serves it on import; --list has no hook
            sys.modules[DECORATORS] = importlib.import_module("fl_patch.compat.flagscale.decorators")
    elif DECORATORS in sys.modules:
        take_over_on_load(sys.modules[DECORATORS])
    elif not hooked:
        _load_and_take_over(tree.decorators)
    loaded = []
    for name, _spec in tree.registries:
        if name in sys.modules:
            if not flagscale_compat.registrations_seen(name):
                # Imported before fl_patch could wrap ``register``: run its register() calls again.
                with contextlib.suppress(Exception):
                    with registry.atomically():
                        importlib.reload(sys.modules[name])
            loaded.append(name)
        elif import_source(name, "FlagScale registry", registry, problems) is not None:
            loaded.append(name)
    if not loaded:
        return None
    _say_loaded(tree, registry)
    return ", ".join(loaded)


def _say_loaded(tree: Tree, registry: Registry) -> None:
    """One line on stderr, on rank 0, that the tree's registrations are in: a tree on PYTHONPATH
    changes what runs, and nothing else would show it had been picked up (or which copy was)."""
    import multiprocessing

    child = multiprocessing.parent_process() is not None
    if os.environ.get("RANK", "0") != "0" or child:
        return
    count = sum(1 for r in registry.registrations() if r.source.startswith("megatron.plugin"))
    where = tree.plugin_dirs[0] if tree.plugin_dirs else "?"
    sys.stderr.write(
        f"fl_patch: FlagScale plugin tree loaded from {where} ({count} registration(s); "
        "--no-flagscale or FL_PATCH_FLAGSCALE=0 ignores it)\n"
    )


def _say_not_used(tree: Tree | None) -> None:
    """Once (rank 0, not in a multiprocessing child): a tree sits where Python looks only by default, unused."""
    import multiprocessing

    if tree is None or os.environ.get("RANK", "0") != "0" or multiprocessing.parent_process() is not None:
        return
    where = tree.plugin_dirs[0] if tree.plugin_dirs else "?"
    parent = os.path.dirname(os.path.dirname(where))
    sys.stderr.write(
        f"fl_patch: a FlagScale plugin tree at {where} is not loaded: it is on sys.path only as the current "
        f"or the script's directory, and nobody named it. To use it, put {parent} on PYTHONPATH, or set "
        "FL_PATCH_FLAGSCALE=1\n"
    )


def _load_and_take_over(spec: importlib.machinery.ModuleSpec) -> None:
    """Import the tree's ``decorators`` by hand, wrapped before anyone binds its ``register``."""
    module = importlib.util.module_from_spec(spec)
    sys.modules[DECORATORS] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException:
        sys.modules.pop(DECORATORS, None)
        raise
    take_over_on_load(module)


def tree_platform() -> str | None:
    """The tree's ``get_platform().device_name()`` (``kunlunxin``, ``npu``, ``cuda``...), its prints on stderr.

    None when no tree with ``megatron/plugin/platform`` is on the path. The engine asks this
    when it first chooses vendors (``Engine.add_platform_hint``, set up at installation).
    """
    tree = find_tree()
    if tree is None or tree.platform is None or tree.regular_package is not None:
        return None
    with contextlib.redirect_stdout(sys.stderr):
        manager = importlib.import_module(PLATFORM_MANAGER)
        platform = manager.get_platform()
    name = platform.device_name() if platform is not None else None
    return str(name).split(":")[0].strip().lower() or None if name else None
