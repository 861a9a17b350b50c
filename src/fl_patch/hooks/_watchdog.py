"""Putting the finder back when something takes it out of ``sys.meta_path``.

A test fixture that saves ``sys.meta_path[:]`` and restores it afterwards, or a tool
that rebuilds the list, removes the finder without a word; every later import would
then load upstream code. The finder cannot notice its own absence, so the watchdog works
through ``sys.path_hooks`` and ``sys.path_importer_cache``, which such code leaves alone.

A path hook alone is not enough: the path-based import system calls the path hooks only for
a directory it has not seen, and a module from a directory seen before (the program's own,
megatron's) is found by the cached path-entry finder, hook or no hook. So every path-entry
finder is watched (``WatchingEntryFinder``, a transparent proxy: ``isinstance``, ``pkgutil``
and every attribute are the real finder's): the ones the path hook makes from then on, and
those already in ``sys.path_importer_cache`` at installation. On each lookup it checks that
the finder is still in ``sys.meta_path``. If not, it puts it back in front, tells the engine
(which catches up with anything that loaded past it), and, when the module being looked up is
a watched one, hands the import system that module's spec through the finder, so that it is
patched as it loads — this import began before the finder was back, so the finder itself will
not be asked for it — and says so once, naming the module.
"""

from __future__ import annotations

import functools
import sys
import threading
from importlib.machinery import ModuleSpec
from typing import TYPE_CHECKING, Any

from fl_patch.core.errors import warn

if TYPE_CHECKING:
    from ._finder import PatchingFinder
    from ._observer import ImportObserver

__all__ = ["PathHookWatchdog", "watched_entry"]


class PathHookWatchdog:
    def __init__(self, finder: PatchingFinder, observer: ImportObserver) -> None:
        self._finder = finder
        self._observer = observer
        self.active = True
        self._local = threading.local()
        # Before this is in sys.path_hooks: importing wrapt from inside the hook would ask the hook.
        _watching_class()

    def __call__(self, path: str) -> object:
        self.put_back(None, None)
        # The path-entry finder the other hooks would make, watched (see the module doc).
        for hook in list(sys.path_hooks):
            if hook is self or isinstance(hook, PathHookWatchdog):
                continue
            try:
                entry = hook(path)
            except ImportError:
                continue
            return watched_entry(entry, self) if hasattr(entry, "find_spec") else entry
        raise ImportError("fl_patch's watchdog: no path hook handles this path")

    def put_back(self, fullname: str | None, spec: ModuleSpec | None) -> ModuleSpec | None:
        """Put the finder back if it is gone; ``spec`` of ``fullname``, hooked when it has to be.

        The lookup that finds the finder gone may be in a directory before the module's own
        (``spec`` None there): which name's lookup put it back is remembered (per thread), so
        that the entry finder that does find it hooks it.
        """
        finder = self._finder
        if self.active and finder not in sys.meta_path:
            sys.meta_path.insert(0, finder)
            self._observer.meta_path_changed()
            self._local.resumed = fullname
        if fullname is None or spec is None or getattr(self._local, "resumed", None) != fullname:
            return spec
        self._local.resumed = None
        if finder.is_busy(fullname) or not self._observer.watches(fullname):
            return spec  # the finder itself is asking (it hooks what it gets), or not a watched module
        warn(
            f"fl_patch: its import hook had been taken out of sys.meta_path (a saved copy of the list "
            f"restored?); it is back, and {fullname}, imported meanwhile, is patched as it loads"
        )
        return finder.hooked(fullname, spec)

    def watch_cached(self) -> None:
        """Watch the path-entry finders already in ``sys.path_importer_cache``."""
        cache = sys.path_importer_cache
        for path, entry in list(cache.items()):
            if entry is not None and hasattr(entry, "find_spec") and not _is_watching(entry):
                cache[path] = watched_entry(entry, self)

    def release_cached(self) -> None:
        """Put the real path-entry finders back (at uninstall)."""
        self.active = False
        cache = sys.path_importer_cache
        for path, entry in list(cache.items()):
            # entry is then a WatchingEntryFinder, a class made at run time that mypy cannot name
            if _is_watching(entry) and entry._self_watchdog is self:  # type: ignore[union-attr]
                cache[path] = entry.__wrapped__  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return "<fl_patch PathHookWatchdog>"


@functools.cache
def _watching_class() -> type:
    # Made at installation, not when this module is imported: wrapt costs ~25 ms to import, which
    # an armed process that never installs must not pay.
    import wrapt

    class WatchingEntryFinder(wrapt.ObjectProxy):
        """A path-entry finder that, at each lookup, checks fl_patch's finder is still in ``sys.meta_path``."""

        def __init__(self, entry: object, watchdog: PathHookWatchdog) -> None:
            super().__init__(entry)
            self._self_watchdog = watchdog

        def find_spec(self, fullname: str, target: object = None) -> ModuleSpec | None:
            spec = self.__wrapped__.find_spec(fullname, target)
            return self._self_watchdog.put_back(fullname, spec)

    return WatchingEntryFinder


def watched_entry(entry: object, watchdog: PathHookWatchdog) -> Any:  # Any: a proxy standing in for entry
    """``entry`` watched: a ``WatchingEntryFinder`` (see the module doc)."""
    return _watching_class()(entry, watchdog)


def _is_watching(entry: object) -> bool:
    return _watching_class.cache_info().currsize > 0 and isinstance(entry, _watching_class())
