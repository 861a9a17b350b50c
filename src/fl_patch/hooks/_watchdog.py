"""Putting the finder back when something takes it out of ``sys.meta_path``.

A test fixture that saves ``sys.meta_path[:]`` and restores it afterwards, or a tool
that rebuilds the list, removes the finder without a word; every later import would
then load upstream code. The finder cannot notice its own absence, so this watchdog
sits in ``sys.path_hooks``, which such code leaves alone. The path-based import
system consults the path hooks whenever it meets a directory it has not seen, which
happens at the first import from every package: the watchdog then checks that the
finder is still in ``sys.meta_path`` (putting it back in front, and telling the engine
to catch up with what loaded past it), and declines the directory (``ImportError``,
the protocol's "not mine"), so the usual path hooks handle it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._finder import PatchingFinder
    from ._observer import ImportObserver

__all__ = ["PathHookWatchdog"]


class PathHookWatchdog:
    def __init__(self, finder: PatchingFinder, observer: ImportObserver) -> None:
        self._finder = finder
        self._observer = observer

    def __call__(self, path: str) -> object:
        if self._finder not in sys.meta_path:
            sys.meta_path.insert(0, self._finder)
            self._observer.meta_path_changed()
        raise ImportError("fl_patch's watchdog handles no path")

    def __repr__(self) -> str:
        return "<fl_patch PathHookWatchdog>"
