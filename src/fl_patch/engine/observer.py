"""The engine: as each watched module finishes loading, the targets it owns are put in place.

It is the import hook's ``ImportObserver``. The targets themselves (``core.target``) choose
an impl and install it; the engine decides *when*, and does what concerns several
targets or modules at once:

- after a module body ran, the targets that module owns are applied, then the names
  that modules loaded *during* that body bound to the originals are swept (``core.bindings``);
- every module it observes (all of ``megatron``, and the packages on each target's path)
  that imports a patched name later is recorded, so ``uninstall()`` restores exactly the
  names fl_patch knows about and nothing else;
- a target that cannot be applied yet (its impl module is still loading, or torch itself
  is, so no vendor can be chosen) is retried once that module has loaded;
- *catching up*: a module that finished loading without passing through the hook
  (another import hook handled it, ``sys.meta_path`` was reset, or its targets were
  registered while it was importing) is patched at the next chance, with a warning
  when the hook was bypassed;
- a strict error that the program caught and ran past is raised again at the next
  watched import.

Locking: ``lock`` guards the engine's tables and the moment a patch is set. It is
never held while importing anything (an impl, a registry): a thread holding it while
importing could wait for a module lock that another thread holds while it, in its
own import hook, waits for ``lock``.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import types
import weakref
from collections.abc import Callable, Collection
from importlib.machinery import ModuleSpec

from fl_patch.activation.settings import Settings
from fl_patch.core.bindings import NameBindings
from fl_patch.core.errors import FlPatchError, ProblemSink, is_stop_request
from fl_patch.core.records import PatchRecord, Status
from fl_patch.core.registration import Registration
from fl_patch.core.registry import Registry
from fl_patch.core.resolve import describe, owned_path, resolve_in, unwrap
from fl_patch.core.target import Target
from fl_patch.core.vendors import VendorChoice
from fl_patch.engine.catch_up import CatchUp
from fl_patch.engine.pending import PendingWork
from fl_patch.engine.retries import Retries

__all__ = ["Engine"]

# Observed whole (every module below them goes through the hook): megatron's own modules
# are where patched names are imported from and where the deferred sources start.
OBSERVED_ROOTS = frozenset({"megatron"})


class Engine(CatchUp, Retries, PendingWork):
    """The import observer. Its parts: catching up (``catch_up``), applying and retrying
    (``retries``), pending work (``pending``); this class holds the state, configuration,
    the hook's callbacks and the queries and undo (its lifecycle)."""

    def __init__(self, registry: Registry, problems: ProblemSink) -> None:
        self.registry = registry
        self.problems = problems
        self.settings = Settings()
        self.installed = False
        self.lock = threading.RLock()
        self.call_counter: Callable[[str, object], object] | None = None
        self.compare: Callable[[str, object, object, str], object] | None = None  # compare mode (fl_patch.compare)
        self.vendor_choice = VendorChoice(problems)
        self._served: dict[str, str] = {}  # module name -> fl_patch module served when none is installed
        self._on_load: dict[str, Callable[[types.ModuleType], None]] = {}  # module name -> run after its body
        self._trigger_roots: frozenset[str] = frozenset()  # FL_PATCH_TRIGGERS: their load runs the deferred sources
        self._deferred: Callable[[], None] | None = None
        self._executing: set[str] = set()  # watched module bodies running right now
        self._processed: dict[str, weakref.ref[types.ModuleType]] = {}  # name -> the module object handled
        # Targets that could not be applied yet, each with the module whose import must finish first.
        self._pending: list[tuple[Target, types.ModuleType, str, tuple[str, ...], str]] = []
        self._waiting_on: set[str] = set()  # modules importing past the hook: catch up once they have loaded
        self._catch_up_due = False
        self._quiet: set[str] = set()  # targets registered while their module was importing
        self._following: set[str] = set()  # modules importing past the hook, applied as their body ends
        self._catching_up = threading.local()
        self.bindings = NameBindings()
        registry.add_listener(self._on_registered)

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

    def vendors(self, among: Collection[str] | None = None) -> tuple[str, ...]:
        """The vendor priority list (``VendorChoice``; ``among``: a target's vendors, see there);
        ``PlatformNotReady`` while torch imports."""
        return self.vendor_choice.vendors(among)

    def platform_detected(self) -> bool:
        return self.vendor_choice.detected

    def check_preferred_vendors(self, already_said: Collection[str] = ()) -> None:
        known = self.registry.vendors()
        for vendor in self.settings.prefer:
            if vendor not in known and vendor not in already_said:
                self.problems.problem(
                    f"fl_patch: MG_FL_PREFER names vendor {vendor!r}, which no registration provides "
                    f"(registered vendors: {', '.join(sorted(known)) or 'none'}); it is ignored"
                )

    # ------------------------------------------------------------------ PatchContext (for targets)
    def disabled(self, target: Target) -> bool:
        disabled = self.settings.disabled_targets
        return target.name in disabled or target.method_key in disabled

    def problem(self, message: str, where: tuple[str, int] | None) -> None:
        self.problems.problem(message, where=where)

    def impl_cycle(self, target: Target, registration: Registration) -> str | None:
        """``a.f -> b.g -> a.f`` when impls name registered targets in a circle, else None."""
        chain = [target.name]
        impl = registration.impl
        while isinstance(impl, str):
            path = impl.replace(":", ".")
            if path in chain:
                loop = chain[chain.index(path) :]
                start = loop.index(min(loop))  # the same text from whichever member it is found
                loop = loop[start:] + loop[:start]
                return " -> ".join([*loop, loop[0]])
            following = self.registry.get(path)
            if following is None:
                return None
            chain.append(path)
            candidates = following.select(self.vendors(following.vendors()), self.disabled(following)).candidates
            if not candidates:
                return None
            impl = candidates[0].impl
        return None

    # ------------------------------------------------------------------ ImportObserver
    def watches(self, fullname: str) -> bool:
        if self._catch_up_due or ((self._waiting_on or self._pending) and self._waited_for_loaded()):
            self.catch_up()
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
        return functools.partial(target.provide_module, self, has_upstream=real_spec is not None)

    def before_exec(self, module: types.ModuleType) -> None:
        swallowed = self.problems.swallowed() if self.problems.strict else None
        if swallowed is not None:
            raise FlPatchError(f"{swallowed} (FL_PATCH_STRICT=1: this error was caught by the program, which went on)")
        with self.lock:
            self._executing.add(module.__name__)
        if self._deferred is not None and module.__name__.startswith("megatron."):
            self.run_deferred()

    def exec_failed(self, module: types.ModuleType) -> None:
        with self.lock:
            self._executing.discard(module.__name__)

    def after_exec(self, module: types.ModuleType) -> None:
        name = module.__name__
        # A module body may put another object in its place (sys.modules[__name__] = ...):
        # that is what its importers get, so that is what is patched.
        current = sys.modules.get(name, module)
        if self._deferred is not None and name in self._trigger_roots:
            self.run_deferred()  # activated by a package of FL_PATCH_TRIGGERS, which has now loaded
        with self.lock:
            self._executing.discard(name)
            self._mark_processed(name, current)
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
                self._apply([(current, name, targets)], window=name, late=False)
            self.bindings.record_later(current)
            if self.registry.watches(name):  # only a module that may own targets stores others (see below)
                self._note_unobserved(name)
            if self._catch_up_due or ((self._waiting_on or self._pending) and self._waited_for_loaded()):
                self.catch_up()
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

    # ------------------------------------------------------------------ applying

    # ------------------------------------------------------------------ queries and undo
    def original(self, target: str) -> object:
        found = self.registry.get(target)
        if found is not None and found.patches:
            return found.original()
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
        with self.lock:
            self._processed.clear()
            self.bindings.clear()
            self._pending.clear()
            self._waiting_on.clear()
            self._quiet.clear()
            self._catch_up_due = False
        for target in reversed(targets):
            target.revert()
        self.problems.reset()

    def records(self, *, detect: bool = True) -> list[PatchRecord]:
        """One record per registration. ``detect=False``: never import torch to find the
        platform (at interpreter exit, say); targets are then reported as waiting."""
        if self._catch_up_due or self._waiting_on or self._pending:
            self.catch_up()
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
            if module is not None and self._processed_module(name) is not module:
                if any(owned_path(module, t.parts, name) for t in self.registry.targets_under(name)):
                    names.append(name)
        return sorted(names)

    def after_fork_in_child(self) -> None:
        self.lock = threading.RLock()

    def reset(self) -> None:
        """Forget every registration and state (tests; never while installed)."""
        self.revert_all()
        with self.lock:
            self.registry.clear()
            self.vendor_choice.reset()
            self._deferred = None
            self._executing.clear()


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
