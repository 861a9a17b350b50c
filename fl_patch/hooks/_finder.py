"""The ``sys.meta_path`` finder: the only code that runs on every import.

For a name no registration can live in, ``find_spec`` is one frozenset lookup and a
``return None``. For a watched name it asks the finders behind it for the real spec
(never ``importlib.util.find_spec``, which would re-enter this finder and import
parent packages) and wraps the loader. A thread-local guard stops recursion; it is
thread-local because a shared "in progress" set lets a second thread importing the
same name slip past unhooked.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._observer import ImportObserver

__all__ = ["PatchingFinder"]


class PatchingFinder:
    def __init__(self, observer: ImportObserver) -> None:
        self._observer = observer
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

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
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

        provide = self._observer.substitute_for(fullname, spec)
        # Imported here, not at the top: the loaders need wrapt (~25 ms to import), which a
        # process that never imports a watched module should not pay at start-up.
        from ._loaders import PatchingLoader, SubstituteLoader

        if provide is not None:
            fallback = spec.loader if spec is not None else None
            substitute = ModuleSpec(
                fullname,
                SubstituteLoader(fullname, provide, fallback, self._observer),
                origin=spec.origin if spec is not None else None,
                is_package=spec is not None and spec.submodule_search_locations is not None,
            )
            if spec is not None and spec.submodule_search_locations is not None:
                substitute.submodule_search_locations = spec.submodule_search_locations
            return substitute
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # not found, or a namespace package: no module body to follow
        if not isinstance(spec.loader, (PatchingLoader, SubstituteLoader)):
            spec.loader = PatchingLoader(spec.loader, self._observer)
        return spec

    def invalidate_caches(self) -> None:
        pass
