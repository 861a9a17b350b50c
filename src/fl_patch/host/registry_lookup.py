"""Where a registry module (``--registry``, ``FL_PATCH_REGISTRY``) is found: one rule in every mode.

A registry module is imported from ``sys.path``, as any module is; if it is not there, from the
directory the job was started in. That directory is ``FL_PATCH_START_DIR``, which the launcher
sets to its own working directory and every child inherits (torchrun's workers, spawn children, a
subprocess started with another ``cwd``); a process activated without the launcher (the bootstrap
on ``PYTHONPATH``) uses its working directory.

Why: ``sys.path`` differs between modes. ``python -m fl_patch --check`` had the current directory
first (as ``python -m`` does); the program it runs has its script's directory there instead
(``python /elsewhere/train.py``). A plugin in the current directory was found by ``--check`` and
not by the run, which then trained without it and said so in one warning. With this rule both
find it, or both refuse with the same message (:func:`not_found_message`).

Only the top-level names that are needed come from that directory, through a finder that acts as
if it were the last entry of ``sys.path`` for those names alone: the registry module's package and
the packages its impls live in. The
directory is not added to ``sys.path``: a module there must not shadow or supply anything else
(an optional ``import apex`` of megatron's, say), which is why the launcher takes the current
directory off its own ``sys.path`` at all (``fl_patch/__init__.py``).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Iterable, Sequence
from types import ModuleType

from fl_patch.config.settings import ENV

__all__ = ["StartDirFinder", "not_found_message", "serve_from_start_dir", "serve_impl_roots", "start_dir"]


def start_dir() -> str:
    """The directory the job was started in (``FL_PATCH_START_DIR``), else this process's working directory."""
    recorded = os.environ.get(ENV.START_DIR, "").strip()
    if recorded:
        return recorded
    try:
        return os.getcwd()
    except OSError:  # the working directory was deleted: nothing can be found there
        return ""


class StartDirFinder:
    """The named top-level packages from the start directory, where ``sys.path`` has no regular module of that name.

    It sits just before the path finder in ``sys.meta_path``, so that it behaves as if the start
    directory were the last entry of ``sys.path`` and nothing more: a regular module or package
    on ``sys.path`` wins; a namespace package there (a bare directory of that name, such as
    ``examples/my_plugin`` beside a script in ``examples/``) loses to a regular one in the start
    directory, as it would lose to one anywhere on ``sys.path``.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.names: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is not None or fullname not in self.names or _regular_on_sys_path(fullname):
            return None
        return _regular_in(fullname, self.directory)

    def invalidate_caches(self) -> None:
        pass


def _regular_in(name: str, directory: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of a module or regular package ``name`` in ``directory`` (not a namespace portion)."""
    if not directory or not name.isidentifier():
        return None
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, [directory])
    except (ImportError, ValueError):
        return None
    return spec if spec is not None and spec.origin is not None else None


def _regular_on_sys_path(name: str) -> bool:
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, sys.path)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None


def _finder(directory: str) -> StartDirFinder:
    for entry in sys.meta_path:
        if isinstance(entry, StartDirFinder) and entry.directory == directory:
            return entry
    finder = StartDirFinder(directory)
    index = next((i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder), len(sys.meta_path))
    sys.meta_path.insert(index, finder)
    return finder


def _namespace_only(name: str) -> bool:
    """Whether ``name`` was imported as a namespace package (a directory without ``__init__.py``)."""
    module = sys.modules.get(name)
    return module is not None and getattr(module, "__file__", None) is None and hasattr(module, "__path__")


def serve_from_start_dir(module_name: str) -> bool:
    """Make the top-level package of ``module_name`` importable from the start directory, if it is there only.

    True when it was made importable (the caller imports again); False when it is not there, or
    already importable (then the module is missing for another reason).
    """
    top = module_name.partition(".")[0]
    directory = start_dir()
    if _regular_in(top, directory) is None or _regular_on_sys_path(top):
        return False
    if top in sys.modules and not _namespace_only(top):
        return False
    finder = _finder(directory)
    if top in finder.names:
        return False  # served already, and still not found: the module itself is missing
    finder.names.add(top)
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]  # the namespace package that hid it, and what was imported through it
    importlib.invalidate_caches()
    return True


def serve_impl_roots(registry_module: str, impls: Iterable[str]) -> None:
    """The packages of ``impls`` (registered by a registry found in the start directory), from there too."""
    directory = start_dir()
    finder = next((f for f in sys.meta_path if isinstance(f, StartDirFinder) and f.directory == directory), None)
    if finder is None or registry_module.partition(".")[0] not in finder.names:
        return
    for impl in impls:
        root = impl.partition(":")[0].partition(".")[0]
        if root and root not in finder.names and not _regular_on_sys_path(root) and _regular_in(root, directory):
            finder.names.add(root)


def _close_names(word: str, choices: Iterable[str]) -> str:
    from fl_patch.config.suggest import did_you_mean

    return did_you_mean(word, choices, cutoff=0.75)


def _top_level_names(directory: str) -> set[str]:
    import pkgutil

    names: set[str] = set()
    for entries in (sys.path, [directory] if directory else []):
        try:
            names |= {m.name for m in pkgutil.iter_modules(entries)}
        except Exception:  # noqa: BLE001  (an unreadable entry: fewer suggestions, the message stands)
            continue
    return names


def not_found_message(what: str, module_name: str, missing: str) -> str:
    """The one message for a registry module that neither ``sys.path`` nor the start directory has.

    ``missing`` is the name Python could not find (``exc.name``): the top-level package, or a
    module inside a package that exists (``myplug.registyr``), which gets the package's own
    modules as suggestions instead of a ``PYTHONPATH`` hint that would not help.
    """
    import pkgutil

    directory = start_dir()
    head = f"fl_patch: {what} {module_name!r} was not found"
    parent_name, _, leaf = missing.rpartition(".")
    parent = sys.modules.get(parent_name) if parent_name else None
    if parent is not None and getattr(parent, "__path__", None) is not None:
        where = ", ".join(getattr(parent, "__path__", []))
        try:
            modules = [m.name for m in pkgutil.iter_modules(list(parent.__path__))]
        except Exception:  # noqa: BLE001
            modules = []
        hint = _close_names(leaf, modules)
        if hint:
            hint = hint.replace("(did you mean ", f"(did you mean {parent_name}.")
        listed = f"; it has: {', '.join(sorted(modules)[:8])}" if modules and not hint else ""
        return f"{head}: package {parent_name} ({where}) has no module {leaf!r}{hint}{listed}"
    top = missing.partition(".")[0]
    hint = _close_names(top, _top_level_names(directory))
    looked = f"nor in the directory the job started in ({directory})" if directory else ""
    return (
        f"{head}: no module {top!r} on sys.path {looked}{hint}. "
        f"Fix: start the job from the directory that holds {top}, put that directory on PYTHONPATH, "
        f"or pip install the plugin ({'--registry and FL_PATCH_REGISTRY name' if what == 'registry module' else 'it names'} "
        "a module such as pkg.registry, not a file)"
    )
