"""Applying a batch of targets, and retrying those that could not be applied yet.

A target that cannot be applied yet (its impl module is still loading, or torch itself is, so
no vendor can be chosen) raises ``NotYet`` naming the module it waits for; it is kept here and
retried once that module has loaded (the engine asks at each watched module's load).
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterable

from fl_patch.core.bindings import NameBindings, Window
from fl_patch.core.errors import NotYet
from fl_patch.core.patch import AppliedPatch
from fl_patch.core.records import Status
from fl_patch.core.resolve import owned_path
from fl_patch.core.target import Target
from fl_patch.engine.applier import Applier, initializing

__all__ = ["Batch", "Batches", "still_loading"]

Batch = Iterable[tuple[types.ModuleType, str, list[Target]]]  # (module, its name, targets it may own)

# A target waiting: (the target, the module that owns it, its name, the path inside it, the module it waits for).
_Waiting = tuple[Target, types.ModuleType, str, tuple[str, ...], str]


class Batches:
    def __init__(self, applier: Applier, bindings: NameBindings, lock: threading.RLock) -> None:
        self.applier = applier
        self.bindings = bindings
        self.lock = lock
        self.pending: list[_Waiting] = []

    def apply(self, batch: Batch, *, window: Window, late: bool) -> list[AppliedPatch]:
        """Apply every target of ``batch``; then rebind the names modules loaded since ``window`` bound early."""
        applied: list[AppliedPatch] = []
        for module, name, targets in batch:
            for target in targets:
                attr_path = owned_path(module, target.parts, name)
                if attr_path is None:
                    continue
                try:
                    patch = self.applier.apply(target, module, name, attr_path, late=late)
                except NotYet as exc:
                    with self.lock:
                        self.pending.append((target, module, name, attr_path, exc.blocker))
                    target.set(Status.WAITING, str(exc))
                    continue
                if patch is not None:
                    applied.append(patch)
        self.bindings.rebind(applied, window)
        return applied

    def blockers(self) -> set[str]:
        return {entry[4] for entry in self.pending}

    def retry(self) -> None:
        """Apply the waiting targets whose blocker has finished loading."""
        with self.lock:
            ready = [entry for entry in self.pending if not still_loading(entry[4])]
            self.pending = [entry for entry in self.pending if entry not in ready]
        applied = []
        for target, module, name, attr_path, _ in ready:
            try:
                patch = self.applier.apply(target, module, name, attr_path, late=False)
            except NotYet as exc:
                with self.lock:
                    self.pending.append((target, module, name, attr_path, exc.blocker))
                continue
            if patch is not None:
                applied.append(patch)
        if applied:
            self.bindings.rebind(applied, None)  # later than their modules' load: wherever they are held

    def substitute_loaded(self, target: Target, module: types.ModuleType) -> None:
        patch = self.applier.substitute_loaded(target, module)
        if patch is not None:
            self.bindings.rebind_module(patch, module)

    def clear(self) -> None:
        with self.lock:
            self.pending.clear()


def still_loading(name: str) -> bool:
    module = sys.modules.get(name)
    return isinstance(module, types.ModuleType) and initializing(module)
