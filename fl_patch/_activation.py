"""``install()`` and ``uninstall()``: idempotent, and exact inverses.

``install()`` reads the environment, loads the registry sources, puts the finder
first in ``sys.meta_path`` and patches what is already imported (recorded as
*late*: the report says the program imported megatron before activation).
``uninstall()`` takes the finder out and restores every original, aliases included.
Registrations survive both: a second ``install()`` re-applies them.

``current_finder()`` serves the start-up trigger (``_startup``), which installs from
inside an import and hands that import to the finder itself. ``load_sources()`` loads
every registration source, deferred ones included, without installing anything
(``--list``, ``--check``).
"""

from __future__ import annotations

import os
import sys
import threading

from . import _sources
from ._engine import Engine
from ._settings import Settings, enabled
from .hooks import PatchingFinder

__all__ = [
    "ENGINE",
    "current_finder",
    "install",
    "is_installed",
    "load_sources",
    "uninstall",
]

ENGINE = Engine()

_lock = threading.Lock()
_finder: PatchingFinder | None = None
_eager_sources_loaded = False
_fork_hook = False


def _load_deferred_sources() -> None:
    settings = ENGINE.settings
    if settings.entry_points:
        _sources.load_entry_points(ENGINE.problems)
    if settings.flagscale_tree:
        _sources.load_flagscale_tree(ENGINE.problems)
    ENGINE.check_preferred_vendors()


def install() -> bool:
    """Activate fl_patch in this process; returns False when ``FL_PATCH=0``."""
    global _finder, _eager_sources_loaded, _fork_hook
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
            ENGINE.defer(_load_deferred_sources)
            registries = settings.registry_modules
        else:
            registries = ()
        _finder = PatchingFinder(ENGINE)
        sys.meta_path.insert(0, _finder)
        ENGINE.installed = True
        if not _fork_hook and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=ENGINE.after_fork_in_child)
            _fork_hook = True
    # The user's registry modules load with the finder in place and outside our lock:
    # they may import anything, megatron included, and what they import is patched.
    if registries:
        _sources.load_registry_modules(registries, ENGINE.problems)
    if any(name.startswith("megatron.") for name in list(sys.modules)):
        ENGINE.run_deferred()  # megatron is already loaded: no import will trigger it
    ENGINE.apply_loaded_modules()
    return True


def current_finder() -> PatchingFinder | None:
    """The patching finder in ``sys.meta_path`` while installed."""
    return _finder


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

    For ``--list`` and ``--check``: they need every registration, and must not wait
    for a megatron import to discover entry points or a FlagScale plugin tree.
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
    ENGINE.run_deferred()


def uninstall() -> bool:
    """Deactivate and restore every original; returns False if it was not installed."""
    global _finder
    with _lock:
        if not ENGINE.installed:
            return False
        if _finder is not None and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
        _finder = None
        ENGINE.installed = False
    ENGINE.revert_all()
    return True


def is_installed() -> bool:
    return ENGINE.installed


def _reset_for_tests() -> None:
    """Uninstall and forget all registrations, so the next install() starts afresh."""
    global _eager_sources_loaded
    uninstall()
    ENGINE.reset()
    ENGINE.call_counter = None
    _eager_sources_loaded = False
    # A registry module registers when its body runs: forget the packs' (and the
    # sub-registries they import) so the next install() runs them again; user registry
    # modules are the test's own business.
    for name in [n for n in sys.modules if n.startswith("fl_patch.impls.") and n.endswith("registry")]:
        del sys.modules[name]
