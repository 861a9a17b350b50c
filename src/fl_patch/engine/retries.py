"""Applying a batch of targets, and retrying those that could not be applied yet.

A target that cannot be applied yet (its impl module is still loading, or torch itself is, so
no vendor can be chosen) raises ``NotYet`` naming the module it waits for; it is kept in
``_pending`` and retried once that module has loaded (the engine asks at each watched import).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable
from typing import TYPE_CHECKING

from fl_patch.core.apply import AppliedPatch
from fl_patch.core.bindings import Window
from fl_patch.core.errors import NotYet
from fl_patch.core.records import Status
from fl_patch.core.resolve import owned_path
from fl_patch.core.target import Target, initializing

__all__ = ["Batch", "Retries"]

Batch = Iterable[tuple[types.ModuleType, str, list[Target]]]  # (module, its name, targets it may own)

if TYPE_CHECKING:
    from fl_patch.engine._state import EngineState as _Part
else:
    _Part = object  # the base is for the type checker only (engine._state)


class Retries(_Part):
    """The engine's applying and retrying part; the state it reads is set by ``Engine.__init__``."""

    def _apply(self, batch: Batch, *, window: Window, late: bool) -> list[AppliedPatch]:
        applied: list[AppliedPatch] = []
        for module, name, targets in batch:
            for target in targets:
                attr_path = owned_path(module, target.parts, name)
                if attr_path is None:
                    continue
                try:
                    patch = target.apply(module, name, attr_path, self, late=late)
                except NotYet as exc:
                    with self.lock:
                        self._pending.append((target, module, name, attr_path, exc.blocker))
                    target.status, target.detail = Status.WAITING, str(exc)
                    continue
                if patch is not None:
                    applied.append(patch)
        self.bindings.rebind(applied, window)
        return applied

    def _retry_pending(self) -> None:
        with self.lock:
            ready = [entry for entry in self._pending if not _still_loading(entry[4])]
            self._pending = [entry for entry in self._pending if entry not in ready]
        applied = []
        for target, module, name, attr_path, _ in ready:
            try:
                patch = target.apply(module, name, attr_path, self, late=False)
            except NotYet as exc:
                with self.lock:
                    self._pending.append((target, module, name, attr_path, exc.blocker))
                continue
            if patch is not None:
                applied.append(patch)
        if applied:
            self.bindings.rebind(applied, None)  # later than their modules' load: wherever they are held

    def _substitute_loaded(self, target: Target, module: types.ModuleType) -> None:
        patch = target.substitute_loaded(module, self)
        if patch is not None:
            self.bindings.rebind_module(patch, module)


def _still_loading(name: str) -> bool:
    module = sys.modules.get(name)
    return isinstance(module, types.ModuleType) and initializing(module)
