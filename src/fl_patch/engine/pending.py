"""Work the engine holds for later: the deferred registry sources, and which module objects it handled.

The sources (packs, ``FL_PATCH_REGISTRY``, entry points) are loaded when the first megatron module
(or a ``FL_PATCH_TRIGGERS`` package) starts loading, not at start-up. ``_processed`` remembers,
by weak reference, the module object handled under each name, so a second object stored under
the same name is seen as new.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from fl_patch.core.import_state import plugin_window

__all__ = ["PendingWork"]

if TYPE_CHECKING:
    from fl_patch.engine._state import EngineState as _Part
else:
    _Part = object  # the base is for the type checker only (engine._state)


class PendingWork(_Part):
    """The engine's pending-work part; the state it reads is set by ``Engine.__init__``."""

    def defer(self, load_sources: Callable[[], None]) -> None:
        """Run ``load_sources`` when the first megatron module (or trigger package) starts loading."""
        self._deferred = load_sources

    def run_deferred(self) -> None:
        with self.lock:
            deferred, self._deferred = self._deferred, None
        if deferred is not None:
            with plugin_window():  # registry sources are plugin code run inside an import too
                deferred()

    def _mark_processed(self, name: str, module: object) -> None:
        try:
            self._processed[name] = weakref.ref(module)  # type: ignore[arg-type]
        except TypeError:  # an object that takes no weak reference stands in for a module
            self._processed.pop(name, None)

    def _processed_module(self, name: str) -> object | None:
        ref = self._processed.get(name)
        return ref() if ref is not None else None
