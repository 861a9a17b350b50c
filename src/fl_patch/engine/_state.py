"""The state the engine's parts (``catch_up``, ``retries``, ``pending``) read, for the type checker.

``Engine.__init__`` sets it all, and each part calls methods of the others; the parts are
mixins of ``Engine``, so on their own a type checker finds none of it. Each part takes
``EngineState`` as its base only while type checking (at run time the base is ``object``):
this module changes nothing when the program runs.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable, Iterable

from fl_patch.core.apply import AppliedPatch
from fl_patch.core.bindings import NameBindings, Window
from fl_patch.core.errors import ProblemSink
from fl_patch.core.registry import Registry
from fl_patch.core.target import PatchContext, Target

__all__ = ["EngineState"]


class EngineState(PatchContext):
    """What ``Engine.__init__`` sets (see there for what each holds) and the parts' shared methods.

    A plain class, not a protocol: assignments in the parts then keep the types declared here
    (a protocol base would let each part infer its own). The methods are the parts' own,
    declared here so that each part may call the others'."""

    registry: Registry
    problems: ProblemSink
    installed: bool
    lock: threading.RLock
    bindings: NameBindings
    _deferred: Callable[[], None] | None
    _executing: set[str]
    _processed: dict[str, weakref.ref[types.ModuleType]]
    _pending: list[tuple[Target, types.ModuleType, str, tuple[str, ...], str]]
    _waiting_on: set[str]
    _catch_up_due: bool
    _quiet: set[str]
    _following: set[str]
    _catching_up: threading.local

    # retries.Retries
    def _apply(
        self, batch: Iterable[tuple[types.ModuleType, str, list[Target]]], *, window: Window, late: bool
    ) -> list[AppliedPatch]:
        raise NotImplementedError

    def _retry_pending(self) -> None:
        raise NotImplementedError

    def _substitute_loaded(self, target: Target, module: types.ModuleType) -> None:
        raise NotImplementedError

    # pending.PendingWork
    def _mark_processed(self, name: str, module: object) -> None:
        raise NotImplementedError

    def _processed_module(self, name: str) -> object | None:
        raise NotImplementedError
