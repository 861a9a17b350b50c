"""Catching up: modules that finished loading without the engine seeing them.

A module may load past the hook (another import hook handled it, ``sys.meta_path`` was reset,
its targets were registered while it was importing, or it was stored under a second name in
``sys.modules``). Such cases are noted as they happen (``note_unobserved``, ``waiting_on``) and
patched at the next chance (the next watched module's load, ``report()``, exit), with a warning
when the hook was bypassed. Also here: applying what was imported before installation, and
registrations made while installed (``on_registered``).

Never from ``find_spec``: the interpreter calls it holding its global import lock, and catching
up imports impls (docs/reliability.md, the import-lock rule).
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Callable

from fl_patch.core.bindings import NameBindings, window_items
from fl_patch.core.errors import FlPatchError, ProblemSink
from fl_patch.core.import_state import when_loaded
from fl_patch.core.registration import Registration
from fl_patch.core.registry import Registry
from fl_patch.core.resolve import owned_path
from fl_patch.core.target import Target
from fl_patch.engine.applier import initializing
from fl_patch.engine.batches import Batch, Batches, still_loading
from fl_patch.engine.ledger import ModuleLedger

__all__ = ["CatchUp"]


class CatchUp:
    def __init__(
        self,
        registry: Registry,
        batches: Batches,
        ledger: ModuleLedger,
        bindings: NameBindings,
        problems: ProblemSink,
        lock: threading.RLock,
        installed: Callable[[], bool],
    ) -> None:
        self.registry = registry
        self.batches = batches
        self.ledger = ledger
        self.bindings = bindings
        self.problems = problems
        self.lock = lock
        self._installed = installed
        self.waiting_on: set[str] = set()  # modules importing past the hook: catch up once they have loaded
        self.due = False
        self.quiet: set[str] = set()  # targets registered while their module was importing
        self._following: set[str] = set()  # modules importing past the hook, applied as their body ends
        self._active = threading.local()

    def wanted(self) -> bool:
        """Whether a catch-up has work (a few set lookups: asked at every watched module's load)."""
        if self.due:
            return True
        if not (self.waiting_on or self.batches.pending):
            return False
        for name in self.waiting_on | self.batches.blockers():
            module = sys.modules.get(name)
            if not isinstance(module, types.ModuleType) or not initializing(module):
                return True
        return False

    def note_unobserved(self, window: str) -> None:
        """Watched names that appeared in sys.modules during ``window``'s body without passing the hook.

        The usual case is a module stored under a second name
        (``sys.modules["pkg.experimental"] = import_module("pkg._new")``, as megatron-core's
        nvshmem compat module does): importing that name later finds it in sys.modules and
        never reaches a finder. Catching up patches it under that name.
        """
        for name, module in window_items(window):
            if self.registry.watches(name) and self.ledger.processed_module(name) is not module:
                if module is None or (isinstance(module, types.ModuleType) and initializing(module)):
                    continue
                self.due = True
                return

    def apply_loaded_modules(self) -> None:
        """Patch what was imported before installation (the report says so: ``late``)."""
        self.bindings.holders.reset()  # once per activation: whatever was bound since the last, it is read now
        self.batches.apply(self._loaded_batch(), window=None, late=True)

    def _loaded_batch(self, *, only_unprocessed: bool = False) -> list[tuple[types.ModuleType, str, list[Target]]]:
        batch = []
        for name in self.registry.owner_names():
            module = sys.modules.get(name)
            if module is None or not hasattr(module, "__dict__"):
                continue
            if isinstance(module, types.ModuleType) and initializing(module):
                with self.lock:
                    if name not in self.ledger.executing:
                        self.waiting_on.add(name)  # loading without us: look again once it has loaded
                continue
            with self.lock:
                if only_unprocessed and self.ledger.processed_module(name) is module:
                    continue
                self.ledger.mark_processed(name, module)
            targets = self._substitute_and_targets(name, module)
            if targets:
                batch.append((module, name, targets))
        return batch

    def _substitute_and_targets(self, name: str, module: object) -> list[Target]:
        """A whole-module replacement of ``name`` put in place of ``module``; the targets inside it."""
        whole = self.registry.get(name)
        if whole is not None and isinstance(module, types.ModuleType):
            self.batches.substitute_loaded(whole, module)
        return self.registry.targets_under(name)

    def catch_up(self) -> None:
        """Patch modules that finished loading without this engine seeing them (see the module doc)."""
        if getattr(self._active, "on", False) or not self._installed():
            return
        self._active.on = True
        try:
            self.due = False
            with self.lock:
                self.waiting_on = {n for n in self.waiting_on if still_loading(n)}
            if self.batches.pending:
                self.batches.retry()
            batch = self._loaded_batch(only_unprocessed=True)
            if not batch:
                return
            # Quiet: targets registered while their module was importing, and modules stored
            # under a second name. Otherwise the hook was bypassed, which deserves a warning.
            bypassed = [
                name
                for module, name, targets in batch
                if getattr(module, "__name__", name) == name and any(t.name not in self.quiet for t in targets)
            ]
            patches = self.batches.apply(batch, window=None, late=True)
            self.quiet.difference_update(t.name for _, _, targets in batch for t in targets)
            if bypassed and patches:
                self.problems.problem(
                    "fl_patch: imported without passing through fl_patch's import hook (another import hook "
                    "ahead of it handled them, or sys.meta_path was changed): "
                    + ", ".join(sorted({p.target.rpartition(".")[0] for p in patches if _under(p.target, bypassed)}))
                    + "; their patches were applied after the import"
                )
        finally:
            self._active.on = False

    def on_registered(self, registrations: list[Registration]) -> None:
        """New registrations while installed: patch the ones whose module is loaded already.

        A batch (a registry module's registrations) is applied together, so the alias
        sweep over every loaded module runs once, not once per registration.
        """
        if not self._installed():
            return
        batch: dict[str, tuple[types.ModuleType, str, list[Target]]] = {}
        for registration in registrations:
            target = self.registry.get(registration.target)
            if target is None:
                continue
            loaded = sys.modules.get(target.name)
            if isinstance(loaded, types.ModuleType):
                if initializing(loaded):
                    self.quiet.add(target.name)
                    self.waiting_on.add(target.name)
                    self._follow(target, target.name, loaded)
                else:
                    self.batches.substitute_loaded(target, loaded)
                continue
            owner = self._loaded_owner(target)
            if owner is not None:
                module, name = owner
                batch.setdefault(name, (module, name, []))[2].append(target)
        if batch:
            self.batches.apply(batch.values(), window=None, late=True)

    def _follow(self, target: Target, name: str, module: types.ModuleType) -> None:
        """``target`` was registered while ``name`` imports past the hook: apply it as that body ends.

        Right after the body ran, before the importer gets the module (``import_state.when_loaded``),
        so no call by an importer runs upstream. Where that cannot be followed (a library's own spec
        class), catching up patches it at the next watched import, and this is said, once.
        """
        with self.lock:
            if name in self._following:
                return
            self._following.add(name)

        def loaded() -> None:
            with self.lock:
                self._following.discard(name)
            current = sys.modules.get(name)
            if current is None or not self._installed():
                return  # its import failed: nothing to patch
            try:
                self._apply_just_loaded(name, current)
            except (FlPatchError, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001  (a bug here must not break the host's import)
                self.problems.problem(f"fl_patch: internal error while patching {name}: {exc!r}")

        if not when_loaded(module, loaded):
            with self.lock:
                self._following.discard(name)
            self.problems.problem(
                f"fl_patch: {target.name} was registered while {name} was importing, past fl_patch's import "
                "hook; it is patched at the next import, so its first calls may run upstream code"
            )

    def _apply_just_loaded(self, name: str, module: object) -> None:
        with self.lock:
            self.waiting_on.discard(name)
            self.ledger.mark_processed(name, module)
        targets = self._substitute_and_targets(name, module)
        if targets:
            # window None: importlib has moved the module to the end of sys.modules by now, so the
            # modules its body loaded are found through the holder index instead.
            batch: Batch = [(module, name, targets)]  # type: ignore[list-item]
            self.batches.apply(batch, window=None, late=False)
        self.quiet.difference_update(t.name for t in targets)

    def _loaded_owner(self, target: Target) -> tuple[types.ModuleType, str] | None:
        """The loaded module that owns ``target``, if it has finished loading."""
        parts = target.parts
        for end in range(len(parts) - 1, 0, -1):
            name = ".".join(parts[:end])
            module = sys.modules.get(name)
            if module is None:
                continue
            if self.ledger.is_executing(name):
                return None  # its after_exec has not read the registry yet: it will see this one
            if isinstance(module, types.ModuleType) and initializing(module):
                # Importing, but not through the hook (its import began before this registration
                # made it a watched name): patch it as soon as its body has run.
                self.quiet.add(target.name)
                self.waiting_on.add(name)
                self._follow(target, name, module)
                return None
            if owned_path(module, parts, name) is not None:
                self.ledger.mark_processed(name, module)
                return module, name
            return None
        return None

    def clear(self) -> None:
        with self.lock:
            self.waiting_on.clear()
            self.quiet.clear()
            self.due = False


def _under(target: str, modules: list[str]) -> bool:
    return any(target.startswith(name + ".") for name in modules)
