"""The ``sys.meta_path`` finder: the only code that runs on every import.

For a name no registration can live in, ``find_spec`` is a few set lookups and a
``return None``. For a watched name it asks the finders behind it for the real spec
(never ``importlib.util.find_spec``, which would re-enter this finder and import
parent packages) and wraps the loader. A thread-local guard stops recursion; it is
thread-local because a shared "in progress" set lets a second thread importing the
same name slip past unhooked.

Other import hooks insert themselves at ``sys.meta_path[0]`` too (typeguard,
beartype, pytest's assertion rewriting): one ahead of this finder that takes a
watched module would load it unpatched. So each call first checks that this finder
is still first and, if not, moves back to the front (safe while the import system
iterates the list: moving from position k to 0 shifts only entries before k) and
tells the engine, which catches up with what loaded past it. The finders behind it,
the other hook included, are still asked for the real spec.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING

# At the top, not in find_spec: the loaders import wrapt, and nothing may be imported while
# CPython holds its global import lock (find_spec runs under it). The finder itself is only
# created at install, so a process that never installs does not pay for this.
from ._loaders import substitute_spec, wrap_loader

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._observer import ImportObserver

__all__ = ["PatchingFinder"]


class PatchingFinder:
    def __init__(self, observer: ImportObserver, every_import: Callable[[str], None] | None = None) -> None:
        self._observer = observer
        self._every_import = every_import  # told each name first (cheap: under the global import lock)
        self._local = threading.local()

    def _real_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None) -> ModuleSpec | None:
        for finder in list(sys.meta_path):
            if isinstance(finder, PatchingFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None

    def _stay_first(self) -> None:
        meta_path = sys.meta_path
        try:
            meta_path.remove(self)
        except ValueError:
            return  # not in sys.meta_path at all (uninstalled, or asked directly): not ours to insert
        meta_path.insert(0, self)
        self._observer.meta_path_changed()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        meta_path = sys.meta_path
        if meta_path and meta_path[0] is not self and not _behind_own_trigger(meta_path, self):
            self._stay_first()
        if self._every_import is not None:
            self._every_import(fullname)
        if not self._observer.watches(fullname):
            return None
        busy: set[str] | None = getattr(self._local, "busy", None)
        if busy is None:
            busy = self._local.busy = set()
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = self._real_spec(fullname, path, target)
        finally:
            busy.discard(fullname)
        return self.hooked(fullname, spec)

    def is_busy(self, fullname: str) -> bool:
        """Whether this thread is inside this finder's own lookup of ``fullname``."""
        return fullname in getattr(self._local, "busy", ())

    def hooked(self, fullname: str, spec: ModuleSpec | None) -> ModuleSpec | None:
        """``spec`` (the real one of a watched module), made to load through the engine."""
        provide = self._observer.substitute_for(fullname, spec)
        if provide is not None:
            return substitute_spec(fullname, spec, provide, self._observer)
        if spec is None or spec.loader is None:
            return spec  # not found, or a namespace package: no module body to follow
        spec.loader = wrap_loader(spec.loader, self._observer)
        return spec

    def invalidate_caches(self) -> None:
        pass


def _behind_own_trigger(meta_path: Sequence[object], finder: PatchingFinder) -> bool:
    # The start-up trigger (which installed this finder and stays in the list, disarmed)
    # and other fl_patch finders may sit ahead of us: they never take a module away.
    for entry in meta_path:
        if entry is finder:
            return True
        if not getattr(entry, "fl_patch_inert", False):
            return False
    return False
