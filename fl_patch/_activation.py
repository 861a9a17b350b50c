"""``install()`` and ``uninstall()``: idempotent, and exact inverses.

``install()`` reads the environment, loads the registry sources, puts the finder
first in ``sys.meta_path`` and patches what is already imported (recorded as
*late*: the report says the program imported megatron before activation).
``uninstall()`` takes the finder out and restores every original, aliases included.
Registrations survive both: a second ``install()`` re-applies them.

Two more entry points serve the launcher and the bootstrap ``sitecustomize``:
``install_at_startup()`` is ``install()`` for interpreter start-up, where a registry
module that lives next to the program's script is not importable yet (the script's
directory joins ``sys.path`` only after start-up), so it is tried again when the first
megatron module loads; ``load_sources()`` loads every registration source, deferred
ones included, without installing anything (``--list``, ``--check``).
"""

from __future__ import annotations

import os
import sys
import threading

from . import _sources
from ._engine import Engine
from ._settings import Settings, enabled
from .hooks import PatchingFinder

__all__ = ["ENGINE", "install", "install_at_startup", "is_installed", "load_sources", "uninstall"]

ENGINE = Engine()

_lock = threading.Lock()
_finder: PatchingFinder | None = None
_eager_sources_loaded = False
_fork_hook = False
# Registry modules that were not importable at interpreter start-up: tried again later.
_retry_registries: tuple[str, ...] = ()
_retry_finder: _RetryRegistries | None = None


class _RetryRegistries:
    """A ``sys.meta_path`` entry that loads the start-up's missing registry modules once.

    It fires at the first import once ``site`` has finished (imports made by
    ``sitecustomize`` itself are still start-up). It sits before the patching
    finder, so the import that fires it is already
    looked at with the registrations it added. It stays in ``sys.meta_path``, inert,
    until ``uninstall()``: removing an entry while the import system iterates over
    ``sys.meta_path`` would make that very import skip the entry after it (the
    patching finder).
    """

    armed = True

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if self.armed and not _site_initializing():
            self.armed = False
            _load_retry_registries()
        return None

    def invalidate_caches(self) -> None:
        pass


def _site_initializing() -> bool:
    """Whether ``site`` (hence ``sitecustomize``, ``usercustomize``) is still running: start-up."""
    site = sys.modules.get("site")
    return bool(getattr(getattr(site, "__spec__", None), "_initializing", False))


def _load_retry_registries() -> None:
    # No lock: this runs inside imports, and the tuple swap is all that needs care
    # (a second caller finds it empty; importing a module twice is a no-op anyway).
    global _retry_registries
    retry, _retry_registries = _retry_registries, ()
    if retry:
        _sources.load_registry_modules(retry, ENGINE.problems)


def _load_deferred_sources() -> None:
    settings = ENGINE.settings
    _load_retry_registries()
    if settings.entry_points:
        _sources.load_entry_points(ENGINE.problems)
    if settings.flagscale_tree:
        _sources.load_flagscale_tree(ENGINE.problems)
    ENGINE.check_preferred_vendors()


def install() -> bool:
    """Activate fl_patch in this process; returns False when ``FL_PATCH=0``."""
    return _install(at_startup=False)


def install_at_startup() -> bool:
    """``install()`` as the bootstrap ``sitecustomize`` runs it, before the program exists.

    The one difference: a registry module that cannot be found yet is not a problem
    yet. ``sys.path`` has no script directory during start-up (the interpreter adds
    it afterwards), so ``--registry my_registry`` for a ``my_registry.py`` next to
    ``train.py`` would always fail here. Such modules are loaded at the program's
    first import (``sys.path`` is complete by then), before that import is looked
    at, and reported then if they still cannot be found.
    """
    return _install(at_startup=True)


def _not_found_yet(module_name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module_name) is None
    except (ImportError, ValueError):  # a parent package is missing too
        return True


def _install(*, at_startup: bool) -> bool:
    global _finder, _eager_sources_loaded, _fork_hook, _retry_registries, _retry_finder
    if not enabled():
        return False
    with _lock:
        if ENGINE.installed:
            return True
        settings = Settings.from_environ()
        ENGINE.configure(settings)
        _configure_report(settings)
        if not _eager_sources_loaded:
            _eager_sources_loaded = True
            _sources.load_packs(settings.packs, ENGINE.problems)
            registries = settings.registry_modules
            if at_startup:
                _retry_registries = tuple(name for name in registries if _not_found_yet(name))
                registries = tuple(name for name in registries if name not in _retry_registries)
            _sources.load_registry_modules(registries, ENGINE.problems)
            ENGINE.defer(_load_deferred_sources)
        _finder = PatchingFinder(ENGINE)
        sys.meta_path.insert(0, _finder)
        if _retry_registries:
            _retry_finder = _RetryRegistries()
            sys.meta_path.insert(0, _retry_finder)
        ENGINE.installed = True
        if not _fork_hook and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=ENGINE.after_fork_in_child)
            _fork_hook = True
    if any(name.startswith("megatron.") for name in list(sys.modules)):
        ENGINE.run_deferred()  # megatron is already loaded: no import will trigger it
    ENGINE.apply_loaded_modules()
    return True


def _configure_report(settings: Settings) -> None:
    """Report mode (``FL_PATCH_REPORT``): count calls through patches, print a report at exit.

    The counting module is imported only in report mode: a normal run pays nothing.
    """
    if settings.report_at_exit:
        from . import _exit_report

        _exit_report.enable(ENGINE)
    elif ENGINE.call_counter is not None:
        ENGINE.call_counter = None


def load_sources() -> None:
    """Load every registration source now, deferred ones included, without installing.

    (Registry modules missing at start-up are retried here too.)

    For ``--list`` and ``--check``: they need every registration, and must not wait
    for a megatron import to discover entry points or a FlagScale plugin tree. The
    FlagScale tree is found through the ``megatron`` namespace package, which is
    imported here only when importing it runs no code (no ``megatron/__init__.py``).
    """
    global _eager_sources_loaded
    with _lock:
        if not ENGINE.installed:
            ENGINE.configure(Settings.from_environ())
        settings = ENGINE.settings
        if not _eager_sources_loaded:
            _eager_sources_loaded = True
            _sources.load_packs(settings.packs, ENGINE.problems)
            _sources.load_registry_modules(settings.registry_modules, ENGINE.problems)
            ENGINE.defer(_load_deferred_sources)
    if settings.flagscale_tree and "megatron" not in sys.modules:
        _import_megatron_namespace()
    ENGINE.run_deferred()


def _import_megatron_namespace() -> None:
    import importlib
    import importlib.machinery

    try:
        spec = importlib.machinery.PathFinder.find_spec("megatron")
    except (ImportError, ValueError):
        return
    if spec is not None and spec.origin in (None, "namespace") and spec.submodule_search_locations:
        importlib.import_module("megatron")


def uninstall() -> bool:
    """Deactivate and restore every original; returns False if it was not installed."""
    global _finder, _retry_finder
    with _lock:
        if not ENGINE.installed:
            return False
        for entry in (_finder, _retry_finder):
            if entry is not None and entry in sys.meta_path:
                sys.meta_path.remove(entry)
        _finder = None
        _retry_finder = None
        ENGINE.installed = False
    ENGINE.revert_all()
    return True


def is_installed() -> bool:
    return ENGINE.installed


def _reset_for_tests() -> None:
    """Uninstall and forget all registrations, so the next install() starts afresh."""
    global _eager_sources_loaded, _retry_registries
    uninstall()
    ENGINE.reset()
    ENGINE.call_counter = None
    _eager_sources_loaded = False
    _retry_registries = ()
