"""Which watched modules are loading now, and which module object was handled under each name.

``processed`` remembers, by weak reference, the module object handled under each name, so a
second object stored under the same name (a re-import, ``sys.modules[name] = other``) is seen
as new; ``executing`` are the watched module bodies running right now.
"""

from __future__ import annotations

import threading
import types
import weakref

__all__ = ["ModuleLedger"]


class ModuleLedger:
    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock
        self.executing: set[str] = set()
        self._processed: dict[str, weakref.ref[types.ModuleType]] = {}

    def started(self, name: str) -> None:
        with self.lock:
            self.executing.add(name)

    def ended(self, name: str) -> None:
        with self.lock:
            self.executing.discard(name)

    def is_executing(self, name: str) -> bool:
        with self.lock:
            return name in self.executing

    def mark_processed(self, name: str, module: object) -> None:
        with self.lock:
            try:
                self._processed[name] = weakref.ref(module)  # type: ignore[arg-type]
            except TypeError:  # an object that takes no weak reference stands in for a module
                self._processed.pop(name, None)

    def processed_module(self, name: str) -> object | None:
        ref = self._processed.get(name)
        return ref() if ref is not None else None

    def clear(self) -> None:
        with self.lock:
            self._processed.clear()
            self.executing.clear()
