"""The engine: as each watched module finishes loading, the targets it owns are put in place.

It is the import hook's ``ImportObserver`` (``hooks``): the hook calls ``watches`` (from
``find_spec``: a few set lookups, nothing else) and ``before_exec``/``after_exec`` around each
watched module body (from the loader, where the interpreter holds only that module's lock). The
engine decides *when*; its parts, each an object it holds, do the rest:

- ``applier`` (``engine.applier``): one target in one module — choose, import, decide, put, record;
- ``batches`` (``engine.batches``): the targets of a module together, the alias sweep after them,
  and targets that must wait for a module still loading;
- ``catch_up`` (``engine.catch_up``): modules that loaded past the hook, registrations made while
  installed, what was imported before installation;
- ``ledger`` (``engine.ledger``): which watched bodies are running, which module object was handled.

Locking: ``lock`` guards the engine's tables and the moment a patch is set. It is never held
while importing anything (an impl, a registry): a thread holding it while importing could wait
for a module lock that another thread holds while it, in its own import hook, waits for ``lock``.
Nothing here runs inside ``find_spec``, where the interpreter's global import lock is held.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import types
from collections.abc import Callable, Collection
from importlib.machinery import ModuleSpec

from fl_patch.config.settings import Settings
from fl_patch.core.bindings import NameBindings
from fl_patch.core.errors import FlPatchError, ProblemSink, is_stop_request
from fl_patch.core.import_state import plugin_window
from fl_patch.core.patch import Wrap
from fl_patch.core.records import PatchRecord, Status
from fl_patch.core.registry import Registry
from fl_patch.core.resolve import describe, owned_path, resolve_in, unwrap
from fl_patch.core.target import CHANGES, Target
from fl_patch.core.vendors import VendorChoice
from fl_patch.engine.applier import Applier, ClassWrap
from fl_patch.engine.batches import Batches
from fl_patch.engine.catch_up import CatchUp
from fl_patch.engine.ledger import ModuleLedger

__all__ = ["Engine"]

# Observed whole (every module below them goes through the hook): megatron's own modules
# are where patched names are imported from and where the deferred sources start.
OBSERVED_ROOTS = frozenset({"megatron"})


class Engine:
    """The import observer, composed of its parts (see the module doc)."""

    def __init__(self, registry: Registry, problems: ProblemSink) -> None:
        self.registry = registry
        self.problems = problems
        self.settings = Settings()
        self.installed = False
        self.lock = threading.RLock()
        self.vendor_choice = VendorChoice(problems)
        self.bindings = NameBindings()
        self.ledger = ModuleLedger(self.lock)
        self.applier = Applier(
            registry, self.vendor_choice, problems, self.lock, lambda: self.settings.disabled_targets
        )
        self.batches = Batches(self.applier, self.bindings, self.lock)
        self.catch_up = CatchUp(
            registry, self.batches, self.ledger, self.bindings, problems, self.lock, lambda: self.installed
        )
        self._served: dict[str, str] = {}  # module name -> fl_patch module served when none is installed
        self._on_load: dict[str, Callable[[types.ModuleType], None]] = {}  # module name -> run after its body
        self._trigger_roots: frozenset[str] = frozenset()  # FL_PATCH_TRIGGERS: their load runs the deferred sources
        self._deferred: Callable[[], None] | None = None
        registry.add_listener(self.catch_up.on_registered)

    # ------------------------------------------------------------------ configuration
    def configure(self, settings: Settings) -> None:
        with self.lock:
            self.settings = settings
            self.problems.strict = settings.strict
            self.vendor_choice.configure(settings.prefer)
            self._trigger_roots = frozenset(name.partition(".")[0] for name in settings.triggers)

    def serve(self, name: str, module_name: str) -> None:
        """Import ``module_name`` under ``name`` when no module of that name is installed."""
        self._served[name] = module_name

    def on_load(self, name: str, callback: Callable[[types.ModuleType], None]) -> None:
        """Call ``callback(module)`` right after the body of the module ``name`` ran, before its importer gets it."""
        self._on_load[name] = callback

    def add_wrap(self, wrap: Wrap) -> None:
        """Wrap every function/method replacement from now on (report mode's counter, compare mode)."""
        if wrap not in self.applier.wraps:
            self.applier.wraps.append(wrap)

    def remove_wrap(self, wrap: Wrap) -> None:
        if wrap in self.applier.wraps:
            self.applier.wraps.remove(wrap)

    def add_class_wrap(self, wrap: ClassWrap) -> None:
        """For class targets from now on: the class to build instead of the impl (compare mode)."""
        if wrap not in self.applier.class_wraps:
            self.applier.class_wraps.append(wrap)

    def remove_class_wrap(self, wrap: ClassWrap) -> None:
        if wrap in self.applier.class_wraps:
            self.applier.class_wraps.remove(wrap)

    def vendors(self, among: Collection[str] | None = None) -> tuple[str, ...]:
        """The vendor priority list (``VendorChoice``; ``among``: a target's vendors, see there);
        ``PlatformNotReady`` while torch imports."""
        return self.vendor_choice.vendors(among)

    def platform_detected(self) -> bool:
        return self.vendor_choice.detected

    def disabled(self, target: Target) -> bool:
        return self.applier.disabled(target)

    def check_preferred_vendors(self, already_said: Collection[str] = ()) -> None:
        known = self.registry.vendors()
        for vendor in self.settings.prefer:
            if vendor not in known and vendor not in already_said:
                self.problems.problem(
                    f"fl_patch: MG_FL_PREFER names vendor {vendor!r}, which no registration provides "
                    f"(registered vendors: {', '.join(sorted(known)) or 'none'}); it is ignored"
                )

    # ------------------------------------------------------------------ deferred sources
    def defer(self, load_sources: Callable[[], None]) -> None:
        """Run ``load_sources`` when the first megatron module (or trigger package) starts loading."""
        self._deferred = load_sources

    def run_deferred(self) -> None:
        with self.lock:
            deferred, self._deferred = self._deferred, None
        if deferred is not None:
            with plugin_window():  # registry sources are plugin code run inside an import too
                deferred()

    # ------------------------------------------------------------------ ImportObserver
    def watches(self, fullname: str) -> bool:
        # Called from find_spec, under the interpreter's global import lock: lookups only.
        root = fullname.partition(".")[0]
        return (
            root in OBSERVED_ROOTS
            or self.registry.watches(fullname)
            or fullname in self._served
            or root in self._trigger_roots
        )

    def substitute_for(
        self, fullname: str, real_spec: ModuleSpec | None
    ) -> Callable[[], types.ModuleType | None] | None:
        if real_spec is None and fullname in self._served:
            return functools.partial(importlib.import_module, self._served[fullname])
        target = self.registry.get(fullname)
        if target is None or not self.installed:
            return None
        origin = real_spec.origin if real_spec is not None else None
        return functools.partial(
            self.applier.provide_module, target, upstream_origin=origin, has_upstream=real_spec is not None
        )

    def meta_path_changed(self) -> None:
        """The hook found itself moved or removed: modules may have loaded past it."""
        self.catch_up.due = True

    def before_exec(self, module: types.ModuleType) -> None:
        swallowed = self.problems.swallowed() if self.problems.strict else None
        if swallowed is not None:
            raise FlPatchError(f"{swallowed} (FL_PATCH_STRICT=1: this error was caught by the program, which went on)")
        self.ledger.started(module.__name__)
        if self._deferred is not None and module.__name__.startswith("megatron."):
            self.run_deferred()
        if self.installed and self.catch_up.wanted():
            self.catch_up.catch_up()

    def exec_failed(self, module: types.ModuleType) -> None:
        self.ledger.ended(module.__name__)

    def after_exec(self, module: types.ModuleType) -> None:
        name = module.__name__
        # A module body may put another object in its place (sys.modules[__name__] = ...):
        # that is what its importers get, so that is what is patched.
        current = sys.modules.get(name, module)
        if self._deferred is not None and name in self._trigger_roots:
            self.run_deferred()  # activated by a package of FL_PATCH_TRIGGERS, which has now loaded
        self.ledger.ended(name)
        self.ledger.mark_processed(name, current)
        if not self.installed:
            return
        callback = self._on_load.get(name)
        if callback is not None and isinstance(current, types.ModuleType):
            callback(current)
        linked = False
        try:
            # Impls that reach this module through its package (``import a.b`` then ``a.b.name``)
            # need the package attribute, which the import system sets only after we return.
            linked = _link_to_parent(name, current)
            targets = self.registry.targets_under(name)
            if targets:
                self.batches.apply([(current, name, targets)], window=name, late=False)
            self.bindings.record_later(current)
            if self.registry.watches(name):  # only a module that may own targets stores others (see below)
                self.catch_up.note_unobserved(name)
            if self.catch_up.wanted():
                self.catch_up.catch_up()
        except BaseException as exc:  # noqa: BLE001  (a bug of ours is reported; anything else is re-raised below)
            try:
                if isinstance(exc, Exception) and not isinstance(exc, FlPatchError) and not is_stop_request(exc):
                    # A bug here must not break the host's import.
                    self.problems.problem(f"fl_patch: internal error while patching {name}: {exc!r}")
                    return
                raise
            except BaseException:
                # The import fails with it (a strict error, Ctrl-C, the program's signal handler):
                # leave what plain python leaves after a failed import. The import system drops the
                # module from sys.modules; the package attribute we set early must go too, or a
                # retry's ``from pkg import mod`` gets this failed, unpatched module without
                # importing it again.
                if linked:
                    _unlink_from_parent(name, current)
                raise

    # ------------------------------------------------------------------ after install
    def apply_loaded_modules(self) -> None:
        """Patch what was imported before installation (the report says so: ``late``)."""
        self.catch_up.apply_loaded_modules()

    # ------------------------------------------------------------------ queries and undo
    def original(self, target: str) -> object:
        found = self.registry.get(target)
        if found is not None and found.patches:
            return found.original()
        owner_name, _, member = target.rpartition(".")
        owner = self.registry.get(owner_name)
        if owner is not None and owner.patches:
            try:
                return owner.original_member(member)  # a static/class method a redirected class took from its impl
            except LookupError:
                pass
        parts = tuple(target.split("."))
        for end in range(len(parts) - 1, 0, -1):
            name = ".".join(parts[:end])
            module = sys.modules.get(name)
            if not isinstance(module, types.ModuleType):
                continue
            attr_path = owned_path(module, parts, name)
            if attr_path is None:
                break
            resolved = resolve_in(module, attr_path)
            if not resolved.exists:
                raise LookupError(
                    f"fl_patch.original({target!r}): {describe(resolved.holder)} has no attribute {resolved.name!r}"
                )
            return unwrap(resolved.raw)
        if target in sys.modules:
            return sys.modules[target]
        raise LookupError(f"fl_patch.original({target!r}): its module is not imported yet")

    def revert_all(self) -> None:
        targets = self.registry.targets()
        self.ledger.clear()
        self.bindings.clear()
        self.batches.clear()
        self.catch_up.clear()
        for target in reversed(targets):
            target.revert()
        self.problems.reset()

    def state_version(self) -> tuple[object, ...] | None:
        """A value that changes whenever what ``records()`` returns may have changed: every registration added and
        status set (``core.target.CHANGES``), install and uninstall, the vendor list once decided. None while work is
        pending (``records()`` would first catch up). Not covered: a value another tool sets over a patch after it was
        applied, which only ``records()``' walk of the patches in place sees. For callers that ask often and want the
        recorded state (the rank check, at every process group)."""
        if self.catch_up.due or self.catch_up.waiting_on or self.batches.pending:
            return None
        vendors = self.vendor_choice.vendors() if self.vendor_choice.detected else None
        return (CHANGES.count, self.installed, vendors)

    def records(self, *, detect: bool = True) -> list[PatchRecord]:
        """One record per registration. ``detect=False``: never import torch to find the
        platform (at interpreter exit, say); targets are then reported as waiting."""
        if self.catch_up.due or self.catch_up.waiting_on or self.batches.pending:
            self.catch_up.catch_up()
        undetected = not detect and not self.vendor_choice.detected and "torch" not in sys.modules
        records: list[PatchRecord] = []
        for target in self.registry.targets():
            if undetected and not self.vendor_choice.decided_without_detection(target.vendors()):
                records.extend(_undetected(target))
            else:
                records.extend(target.records(self.vendors(target.vendors()), self.disabled(target), self.installed))
        return records

    def unprocessed_modules(self) -> list[str]:
        """Loaded modules that own targets and were never seen by the hook (for the exit check)."""
        names = []
        for name in self.registry.owner_names():
            module = sys.modules.get(name)
            if module is not None and self.ledger.processed_module(name) is not module:
                if any(owned_path(module, t.parts, name) for t in self.registry.targets_under(name)):
                    names.append(name)
        return sorted(names)

    def after_fork_in_child(self) -> None:
        # (a lock another thread held at fork time would stay held forever in the child)
        self.lock = threading.RLock()
        self.ledger.lock = self.applier.lock = self.batches.lock = self.catch_up.lock = self.lock

    def reset(self) -> None:
        """Forget every registration and state (tests; never while installed)."""
        self.revert_all()
        with self.lock:
            self.registry.clear()
            self.vendor_choice.reset()
            self._deferred = None


def _link_to_parent(name: str, module: object) -> bool:
    """Set the package attribute early; whether this did (so a failed import can take it back)."""
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name) if parent_name else None
    if parent is not None and getattr(parent, child, None) is not module:
        try:
            setattr(parent, child, module)
        except (AttributeError, TypeError):
            return False
        return True
    return False


def _unlink_from_parent(name: str, module: object) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name) if parent_name else None
    if parent is not None and getattr(parent, child, None) is module:
        try:
            delattr(parent, child)
        except (AttributeError, TypeError):
            pass


def _undetected(target: Target) -> list[PatchRecord]:
    return [
        PatchRecord(
            target=target.name,
            method_key=registration.method_key,
            vendor=registration.vendor,
            impl=registration.impl_name,
            status=Status.WAITING,
            detail="platform not detected yet (nothing imported torch or a target module)",
            source=registration.source,
        )
        for registration in target.registrations()
    ]
