"""The import hook: a ``sys.meta_path`` finder, the loaders it hands out, and a watchdog.

It knows nothing about registrations or patches: it asks an ``ImportObserver``
(the engine) which names to watch, and tells it when a watched module body has run.
The loaders (which need wrapt) are imported on first use, not with this package.
"""

from __future__ import annotations

from typing import Any

from ._finder import PatchingFinder
from ._watchdog import PathHookWatchdog

__all__ = ["ImportObserver", "PatchingFinder", "PathHookWatchdog"]


def __getattr__(name: str) -> Any:
    if name == "ImportObserver":
        from ._observer import ImportObserver

        return ImportObserver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
