"""The engine: as each watched module finishes loading, the targets it owns are put in place.

It is the import hook's ``ImportObserver``. The targets themselves (``_target``) choose
an impl and install it; the engine decides *when*, and does what concerns several
targets or modules at once:

- after a module body ran, the targets that module owns are applied, then the names
  that modules loaded *during* that body bound to the originals are swept (``_aliases``);
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
from collections.abc import Callable, Iterable
from importlib.machinery import ModuleSpec

from ._aliases import NameBindings
from ._apply import AppliedPatch
from ._errors import FlPatchError, NotYet, ProblemSink
from ._registry import Registration, Registry
from ._report import PatchRecord, Status
from ._resolve import describe, owned_path, resolve_in, unwrap
from ._settings import Settings
from ._target import Target, initializing
from ._vendors import VendorChoice

__all__ = ["Engine"]

# Observed whole (every module below them goes through the hook): megatron's own modules
# are where patched names are imported from and where the deferred sources start.
OBSERVED_ROOTS = frozenset({"megatron"})

Batch = Iterable[tuple[types.ModuleType, str, list[Target]]]  # (module, its name, targets it may own)


class Engine:
    def __init__(self, registry: Registry, problems: ProblemSink) -> None:
        self.registry = registry
        self.problems = problems
        self.settings = Settings()
        self.installed = False
        self.lock = threading.RLock()
        self.call_counter: Callable[[str, object], object] | None = None
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

    def defer(self, load_sources: Callable[[], None]) -> None:
        """Run ``load_sources`` when the first megatron module (or trigger package) starts loading."""
        self._deferred = load_sources

    def run_deferred(self) -> None:
        with self.lock:
            deferred, self._deferred = self._deferred, None
        if deferred is not None:
            deferred()

    def vendors(self) -> tuple[str, ...]:
        """The vendor priority list (``VendorChoice``); ``PlatformNotReady`` while torch imports."""
        return self.vendor_choice.vendors()

    def platform_detected(self) -> bool:
        return self.vendor_choice.detected

    def check_preferred_vendors(self) -> None:
        known = self.registry.vendors()
        for vendor in self.settings.prefer:
            if vendor not in known:
                self.problems.problem(
                    f"fl_patch: MG_FL_PREFER names vendor {vendor!r}, which no registration provides "
                    f"(registered vendors: {', '.join(sorted(known)) or 'none'}); it is ignored"
                )

    def check_disabled_keys(self) -> None:
        """A ``FL_PATCH_DISABLE`` entry that names no registration is a typo: say so, with the near misses."""
        disabled = self.settings.disabled_targets
        if not disabled:
            return
        keys = {r.target for r in self.registry.registrations()} | {r.method_key for r in self.registry.registrations()}
        for key in sorted(disabled - keys):
            from ._suggest import did_you_mean

            self.problems.problem(
                f"fl_patch: FL_PATCH_DISABLE names {key!r}, which is no registered target or method key"
                f"{did_you_mean(key, keys, cutoff=0.7)}; it disables nothing"
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
            candidates = following.select(self.vendors(), self.disabled(following)).candidates
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

    def after_exec(self, module: types.ModuleType, modules_before: int) -> None:
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
        try:
            # Impls that reach this module through its package (``import a.b`` then ``a.b.name``)
            # need the package attribute, which the import system sets only after we return.
            _link_to_parent(name, current)
            targets = self.registry.targets_under(name)
            if targets:
                self._apply([(current, name, targets)], window=modules_before, late=False)
            self.bindings.record_later(current)
            if self.registry.watches(name):  # only a module that may own targets stores others (see below)
                self._note_unobserved(modules_before)
            if self._catch_up_due or ((self._waiting_on or self._pending) and self._waited_for_loaded()):
                self.catch_up()
        except (FlPatchError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001  (a bug here must not break the host's import)
            self.problems.problem(f"fl_patch: internal error while patching {name}: {exc!r}")

    def _note_unobserved(self, modules_before: int) -> None:
        """Watched names that appeared in sys.modules during a body without passing the hook.

        The usual case is a module stored under a second name
        (``sys.modules["pkg.experimental"] = import_module("pkg._new")``, as megatron-core's
        nvshmem compat module does): importing that name later finds it in sys.modules and
        never reaches a finder. Catching up patches it under that name.
        """
        added = len(sys.modules) - modules_before
        if added <= 0:
            return
        try:
            # From the end, over the window only (plus slack for entries deleted meanwhile).
            for _, name in zip(range(added + 32), reversed(sys.modules), strict=False):
                if self.registry.watches(name) and self._processed_module(name) is not sys.modules.get(name):
                    module = sys.modules.get(name)
                    if module is None or (isinstance(module, types.ModuleType) and initializing(module)):
                        continue
                    self._catch_up_due = True
                    return
        except RuntimeError:  # another thread imported meanwhile: look at everything, later
            self._catch_up_due = True

    def _waited_for_loaded(self) -> bool:
        """Whether a module that catching up (or a pending target) waits for has finished loading.

        Asked at every import while something waits, so it is a few dict lookups: a catch-up
        itself walks every module that owns a target.
        """
        waited = set(self._waiting_on)
        waited.update(entry[4] for entry in self._pending)
        for name in waited:
            module = sys.modules.get(name)
            if not isinstance(module, types.ModuleType) or not initializing(module):
                return True
        return False

    def meta_path_changed(self) -> None:
        """The hook found itself moved or removed: modules may have loaded past it."""
        self._catch_up_due = True

    # ------------------------------------------------------------------ applying
    def apply_loaded_modules(self) -> None:
        """Patch what was imported before installation (the report says so: ``late``)."""
        self._apply(self._loaded_batch(), window=None, late=True)

    def _loaded_batch(self, *, only_unprocessed: bool = False) -> list[tuple[types.ModuleType, str, list[Target]]]:
        batch = []
        for name in self.registry.owner_names():
            module = sys.modules.get(name)
            if module is None or not hasattr(module, "__dict__"):
                continue
            if isinstance(module, types.ModuleType) and initializing(module):
                with self.lock:
                    if name not in self._executing:
                        self._waiting_on.add(name)  # loading without us: look again once it has loaded
                continue
            with self.lock:
                if only_unprocessed and self._processed_module(name) is module:
                    continue
                self._mark_processed(name, module)
            whole = self.registry.get(name)
            if whole is not None and isinstance(module, types.ModuleType):
                self._substitute_loaded(whole, module)
            targets = self.registry.targets_under(name)
            if targets:
                batch.append((module, name, targets))
        return batch

    def catch_up(self) -> None:
        """Patch modules that finished loading without this engine seeing them (see the module doc)."""
        if getattr(self._catching_up, "active", False) or not self.installed:
            return
        self._catching_up.active = True
        try:
            self._catch_up_due = False
            with self.lock:
                self._waiting_on = {n for n in self._waiting_on if _still_loading(n)}
            if self._pending:
                self._retry_pending()
            batch = self._loaded_batch(only_unprocessed=True)
            if not batch:
                return
            # Quiet: targets registered while their module was importing, and modules stored
            # under a second name. Otherwise the hook was bypassed, which deserves a warning.
            bypassed = [
                name
                for module, name, targets in batch
                if getattr(module, "__name__", name) == name and any(t.name not in self._quiet for t in targets)
            ]
            patches = self._apply(batch, window=None, late=True)
            self._quiet.difference_update(t.name for _, _, targets in batch for t in targets)
            if bypassed and patches:
                self.problems.problem(
                    "fl_patch: imported without passing through fl_patch's import hook (another import hook "
                    "ahead of it handled them, or sys.meta_path was changed): "
                    + ", ".join(sorted({p.target.rpartition(".")[0] for p in patches if _under(p.target, bypassed)}))
                    + "; their patches were applied after the import"
                )
        finally:
            self._catching_up.active = False

    def _on_registered(self, registrations: list[Registration]) -> None:
        """New registrations while installed: patch the ones whose module is loaded already.

        A batch (a registry module's registrations) is applied together, so the alias
        sweep over every loaded module runs once, not once per registration.
        """
        if not self.installed:
            return
        batch: dict[str, tuple[types.ModuleType, str, list[Target]]] = {}
        for registration in registrations:
            target = self.registry.get(registration.target)
            if target is None:
                continue
            loaded = sys.modules.get(target.name)
            if isinstance(loaded, types.ModuleType):
                if initializing(loaded):
                    self._quiet.add(target.name)
                    self._waiting_on.add(target.name)
                else:
                    self._substitute_loaded(target, loaded)
                continue
            owner = self._loaded_owner(target)
            if owner is not None:
                module, name = owner
                batch.setdefault(name, (module, name, []))[2].append(target)
        if batch:
            self._apply(batch.values(), window=None, late=True)

    def _loaded_owner(self, target: Target) -> tuple[types.ModuleType, str] | None:
        """The loaded module that owns ``target``, if it has finished loading."""
        parts = target.parts
        for end in range(len(parts) - 1, 0, -1):
            name = ".".join(parts[:end])
            module = sys.modules.get(name)
            if module is None:
                continue
            with self.lock:
                if name in self._executing:
                    return None  # its after_exec has not read the registry yet: it will see this one
            if isinstance(module, types.ModuleType) and initializing(module):
                # Importing, but not through the hook (its import began before this registration
                # made it a watched name): patch it once it has loaded.
                self._quiet.add(target.name)
                self._waiting_on.add(name)
                return None
            if owned_path(module, parts, name) is not None:
                with self.lock:
                    self._mark_processed(name, module)
                return module, name
            return None
        return None

    def _apply(self, batch: Batch, *, window: int | None, late: bool) -> list[AppliedPatch]:
        applied: list[AppliedPatch] = []
        for module, name, targets in batch:
            for target in targets:
                attr_path = owned_path(module, target.parts, name)  # type: ignore[arg-type]
                if attr_path is None:
                    continue
                try:
                    patch = target.apply(module, name, attr_path, self, late=late)  # type: ignore[arg-type]
                except NotYet as exc:
                    with self.lock:
                        self._pending.append((target, module, name, attr_path, exc.blocker))  # type: ignore[arg-type]
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
            self.bindings.rebind(applied, None)  # later than their modules' load: one sweep of everything

    def _substitute_loaded(self, target: Target, module: types.ModuleType) -> None:
        patch = target.substitute_loaded(module, self)
        if patch is not None:
            self.bindings.rebind_module(patch, module)

    def _mark_processed(self, name: str, module: object) -> None:
        try:
            self._processed[name] = weakref.ref(module)  # type: ignore[arg-type]
        except TypeError:  # an object that takes no weak reference stands in for a module
            self._processed.pop(name, None)

    def _processed_module(self, name: str) -> object | None:
        ref = self._processed.get(name)
        return ref() if ref is not None else None

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
            if undetected:
                records.extend(_undetected(target))
            else:
                records.extend(target.records(self.vendors(), self.disabled(target), self.installed))
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


def _still_loading(name: str) -> bool:
    module = sys.modules.get(name)
    return isinstance(module, types.ModuleType) and initializing(module)


def _link_to_parent(name: str, module: object) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name) if parent_name else None
    if parent is not None and getattr(parent, child, None) is not module:
        try:
            setattr(parent, child, module)
        except (AttributeError, TypeError):
            pass


def _under(target: str, modules: list[str]) -> bool:
    return any(target.startswith(name + ".") for name in modules)


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
