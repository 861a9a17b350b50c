"""The engine: decides, as each watched module finishes loading, what to put in place.

It is the hook's ``ImportObserver``. For a module that just ran its body it picks,
per registered target the module owns, the vendor's impl (``_registry.select``),
imports the impl (only now: the target module has finished loading, so an impl
that does ``from <target module> import Cls`` gets the original class), installs
it (``_apply``) and rebinds names other modules bound early (``_aliases``).

Locking: ``_lock`` guards the engine's own tables and the moment a patch is set.
It is never held while importing anything (an impl, a registry): a thread holding
it while importing could wait for a module lock that another thread holds while
it, in its own import hook, waits for ``_lock``.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec

from ._aliases import modules_since, rebind_aliases, restore_later_imports, sweepable
from ._apply import AppliedPatch, ImplMismatch, build_replacement, install, revert
from ._errors import FlPatchError, ProblemSink
from ._registry import REGISTRY, Registration, Registry, Selection
from ._report import PatchRecord, Status
from ._resolve import Kind, describe, load_impl, owned_path, resolve_in, unwrap
from ._settings import Settings
from ._vendors import detect_platform, vendor_priority

__all__ = ["FLAGSCALE_DECORATORS", "Engine"]

# Served by fl_patch when no real FlagScale ``megatron.plugin.decorators`` exists.
FLAGSCALE_DECORATORS = "megatron.plugin.decorators"
# Watched even before any registration names them: their first import loads the
# deferred registry sources (entry points, a FlagScale plugin tree).
ALWAYS_WATCHED = frozenset({"megatron.core", "megatron.training", FLAGSCALE_DECORATORS})

_NO_ORIGINAL = object()


@dataclass(eq=False)
class TargetState:
    status: Status = Status.WAITING
    detail: str = ""
    chosen: Registration | None = None
    kind: Kind | None = None
    module: str | None = None
    late: bool = False
    patches: list[AppliedPatch] = field(default_factory=list)

    def set(self, status: Status, detail: str = "") -> None:
        self.status = status
        self.detail = detail


class Engine:
    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry if registry is not None else REGISTRY
        self.problems = ProblemSink()
        self.settings = Settings()
        self.installed = False
        self._lock = threading.RLock()
        self._states: dict[str, TargetState] = {}
        self._impls: dict[int, tuple[Registration, object]] = {}
        self._vendors: tuple[str, ...] | None = None
        self._platform: str | None = None
        self._processed: set[str] = set()  # watched modules whose targets were handled
        self._trigger_roots: frozenset[str] = frozenset()  # FL_PATCH_TRIGGERS: watched too
        self._executing: set[str] = set()  # watched module bodies running right now
        self._deferred: Callable[[], None] | None = None
        # Targets whose impl module was still executing when their own module loaded (the
        # impl module imports that target module at its top): retried once it has finished.
        self._pending: list[tuple[types.ModuleType, str, tuple[str, ...], bool]] = []
        self.call_counter: Callable[[str, object], object] | None = None
        self.registry.add_listener(self._on_registered)

    # ------------------------------------------------------------------ configuration
    def configure(self, settings: Settings) -> None:
        with self._lock:
            self.settings = settings
            self.problems.strict = settings.strict
            self._vendors = None
            self._trigger_roots = frozenset(name.partition(".")[0] for name in settings.triggers)

    def defer(self, load_sources: Callable[[], None]) -> None:
        """Run ``load_sources`` when the first megatron module starts loading."""
        self._deferred = load_sources

    def run_deferred(self) -> None:
        with self._lock:
            deferred, self._deferred = self._deferred, None
        if deferred is not None:
            deferred()

    def vendors(self) -> tuple[str, ...]:
        """The vendor priority list, detected once per installation."""
        if self._vendors is None:
            if self._platform is None:
                try:
                    self._platform = detect_platform()
                except Exception as exc:  # noqa: BLE001  (detection must never break an import)
                    self._platform = "cpu"
                    self.problems.problem(f"fl_patch: could not detect the platform ({exc!r}); assuming 'cpu'")
            self._vendors = vendor_priority(self.settings.prefer, self._platform)
        return self._vendors

    def check_preferred_vendors(self) -> None:
        known = self.registry.vendors()
        for vendor in self.settings.prefer:
            if vendor not in known:
                self.problems.problem(
                    f"fl_patch: MG_FL_PREFER names vendor {vendor!r}, which no registration provides "
                    f"(registered vendors: {', '.join(sorted(known)) or 'none'}); it is ignored"
                )

    # ------------------------------------------------------------------ ImportObserver
    def watches(self, fullname: str) -> bool:
        return fullname in self.registry.watched_names or fullname in ALWAYS_WATCHED or fullname in self._trigger_roots

    def substitute_for(
        self, fullname: str, real_spec: ModuleSpec | None
    ) -> Callable[[], types.ModuleType | None] | None:
        if fullname == FLAGSCALE_DECORATORS and real_spec is None:
            return functools.partial(importlib.import_module, "fl_patch.flagscale_compat")
        if not self.registry.is_target(fullname):
            return None
        selection = self._select(fullname)
        state = self._state(fullname)
        if selection.chosen is None:
            self._record_unselected(state, selection)
            return None
        state.chosen = selection.chosen
        if real_spec is None and not selection.chosen.create:
            self._fail(fullname, selection.chosen, Status.TARGET_MISSING, "no such module is installed")
            return None
        return functools.partial(self._provide_module, fullname, selection.chosen)

    def before_exec(self, module: types.ModuleType) -> None:
        with self._lock:
            self._executing.add(module.__name__)
        if self._deferred is not None and module.__name__.startswith("megatron."):
            self.run_deferred()

    def exec_failed(self, module: types.ModuleType) -> None:
        with self._lock:
            self._executing.discard(module.__name__)

    def after_exec(self, module: types.ModuleType, modules_before: int) -> None:
        name = module.__name__
        if self._deferred is not None and name in self._trigger_roots:
            self.run_deferred()  # activated by a package of FL_PATCH_TRIGGERS, which has now loaded
        with self._lock:
            self._executing.discard(name)
            self._processed.add(name)
            targets = self.registry.targets_under(name) if self.installed else []
        if not targets:
            return
        try:
            self._apply_targets([(module, targets)], window=modules_before, late=False)
            if self._pending:
                self._retry_pending()
        except FlPatchError:
            raise
        except Exception as exc:  # noqa: BLE001  (a bug here must not break the host's import)
            self.problems.problem(f"fl_patch: internal error while patching {name}: {exc!r}")

    # ------------------------------------------------------------------ applying
    def apply_loaded_modules(self) -> None:
        """Patch what was imported before installation (the report says so: ``late``)."""
        batch: list[tuple[types.ModuleType, list[str]]] = []
        for name in sorted(self.registry.watched_names):
            module = sys.modules.get(name)
            if not isinstance(module, types.ModuleType) or _initializing(module):
                continue
            if self.registry.is_target(name):
                self._substitute_loaded_module(name, module)
            with self._lock:
                self._processed.add(name)
                targets = self.registry.targets_under(name)
            if targets:
                batch.append((module, targets))
        self._apply_targets(batch, window=None, late=True)

    def _on_registered(self, registrations: list[Registration]) -> None:
        """New registrations while installed: patch the ones whose module is loaded already.

        A batch (a registry module's registrations) is applied together, so the alias
        sweep over every loaded module runs once, not once per registration.
        """
        if not self.installed:
            return
        batch: dict[str, tuple[types.ModuleType, list[str]]] = {}
        for registration in registrations:
            owner = self._loaded_owner(registration)
            if owner is not None:
                batch.setdefault(owner.__name__, (owner, []))[1].append(registration.target)
        if batch:
            self._apply_targets(batch.values(), window=None, late=True)

    def _loaded_owner(self, registration: Registration) -> types.ModuleType | None:
        """The loaded module that owns ``registration``'s target, if it is loaded and done."""
        parts = registration.parts
        if registration.target in sys.modules and self.registry.is_target(registration.target):
            module = sys.modules[registration.target]
            if isinstance(module, types.ModuleType) and not _initializing(module):
                self._substitute_loaded_module(registration.target, module)
            return None
        for end in range(len(parts) - 1, 0, -1):
            name = ".".join(parts[:end])
            module = sys.modules.get(name)
            if not isinstance(module, types.ModuleType):
                continue
            with self._lock:
                if name in self._executing:
                    return None  # its after_exec has not read the registry yet: it will see this one
                handled = name in self._processed or not _initializing(module)
            if handled and owned_path(module, parts) is not None:
                return module
            return None
        return None

    def _apply_targets(
        self, batch: Iterable[tuple[types.ModuleType, list[str]]], *, window: int | None, late: bool
    ) -> None:
        applied: list[AppliedPatch] = []
        for module, targets in batch:
            for target in targets:
                registrations = self.registry.registrations(target)
                if not registrations:
                    continue
                attr_path = owned_path(module, registrations[0].parts)
                if attr_path is None:
                    continue
                patch = self._apply_one(module, target, attr_path, late)
                if patch is not None:
                    applied.append(patch)
        self._rebind_aliases(applied, window)

    def _apply_one(
        self, module: types.ModuleType, target: str, attr_path: tuple[str, ...], late: bool
    ) -> AppliedPatch | None:
        state = self._state(target)
        state.module = module.__name__
        selection = self._select(target)
        registration = selection.chosen
        if registration is None:
            self._record_unselected(state, selection)
            return None
        state.chosen = registration
        try:
            resolved = resolve_in(module, attr_path)
        except AttributeError as exc:
            return self._fail(target, registration, Status.TARGET_MISSING, f"{exc}")
        if not resolved.exists and not registration.create:
            return self._fail(
                target,
                registration,
                Status.TARGET_MISSING,
                f"{describe(resolved.holder)} has no attribute {resolved.name!r}{_megatron_version_note(target)}",
            )
        with self._lock:
            if any(p.holder is resolved.holder and p.name == resolved.name and p.is_in_place() for p in state.patches):
                return None  # already in place: the same module body is not patched twice
        try:
            impl = self._load_impl(registration)
            if resolved.exists and resolved.kind is Kind.CLASS and _stale_subclass(impl, resolved.raw, registration):
                # The target module was reloaded: the impl subclasses the previous class
                # object. Re-import the impl module so it subclasses the current one.
                impl = self._load_impl(registration, fresh=True)
        except Exception as exc:  # noqa: BLE001  (any failure of plugin code is reported, not raised)
            if _impl_module_initializing(registration):
                # The impl module is mid-import: it imported this target's module at its top
                # (while loading the impl of another target). Its names are not all defined
                # yet; try again once it has finished, rather than call it broken.
                with self._lock:
                    self._pending.append((module, target, attr_path, late))
                state.set(Status.WAITING, "its impl module is still loading")
                return None
            return self._fail(target, registration, Status.IMPL_FAILED, f"{type(exc).__name__}: {exc}")
        try:
            replacement = build_replacement(resolved, impl, create=registration.create)
        except ImplMismatch as exc:
            return self._fail(target, registration, Status.IMPL_FAILED, str(exc))
        if self.call_counter is not None and resolved.kind in (Kind.FUNCTION, Kind.METHOD):
            replacement = self.call_counter(target, replacement)
        with self._lock:
            if any(p.holder is resolved.holder and p.name == resolved.name and p.is_in_place() for p in state.patches):
                return None
            try:
                patch = install(target, resolved, replacement, late=late)
            except (AttributeError, TypeError) as exc:
                return self._fail(
                    target,
                    registration,
                    Status.IMPL_FAILED,
                    f"cannot set {resolved.name!r} on {describe(resolved.holder)}: {exc}",
                )
            self._supersede(state, patch)
            state.kind = patch.kind
            state.late = late
            state.set(Status.APPLIED, "applied after import" if late else "")
        return patch

    def _retry_pending(self) -> None:
        with self._lock:
            ready = [p for p in self._pending if not _impl_module_initializing(self._selected(p[1]))]
            self._pending = [p for p in self._pending if p not in ready]
        for module, target, attr_path, late in ready:
            patch = self._apply_one(module, target, attr_path, late)
            if patch is not None:
                self._rebind_aliases([patch], None)  # later than its module's load: sweep everything

    def _selected(self, target: str) -> Registration | None:
        return self._select(target).chosen

    def _supersede(self, state: TargetState, patch: AppliedPatch) -> None:
        # A reload or re-import patches a fresh module body: the older record for the
        # same place is superseded, but its rebound aliases still need undoing later.
        kept = []
        for old in state.patches:
            if old.holder is patch.holder and old.name == patch.name:
                patch.aliases.extend(old.aliases)
            else:
                kept.append(old)
        state.patches = [*kept, patch]

    def _rebind_aliases(self, applied: list[AppliedPatch], window: int | None) -> None:
        replacements: dict[int, tuple[object, object]] = {}
        owners: dict[int, AppliedPatch] = {}
        skip: set[str] = set()
        for patch in applied:
            original = patch.original
            holder = patch.holder
            if not isinstance(holder, types.ModuleType) or not sweepable(original):
                continue
            if isinstance(original, types.ModuleType):
                continue  # a module bound to a name (``torch``): shared, never swept
            if getattr(original, "__module__", None) != holder.__name__:
                continue  # a re-export: only the named place changes
            replacements[id(original)] = (original, patch.installed)
            owners[id(original)] = patch
            impl_module = getattr(patch.installed, "__module__", None)
            if isinstance(impl_module, str):
                skip.add(impl_module)  # the impl's own module keeps the original (seed pattern)
        if not replacements:
            return
        for module, name, value in rebind_aliases(replacements, modules_since(window), frozenset(skip)):
            owners[id(value)].aliases.append((module, name, value))

    def _unbind_later_imports(self, patches: list[AppliedPatch]) -> None:
        # Modules imported after a patch bound the impl by name (``from .clip_grads import
        # get_grad_norm_fp32``): not aliases we rebound, but upstream must run after
        # uninstall(), so names in the target's own package that hold the impl go back
        # to the original. Names elsewhere (the plugin, the user's script) are theirs.
        restore: dict[int, list[tuple[object, object, str]]] = {}
        roots: set[str] = set()
        skip: set[str] = set()
        for patch in patches:
            if patch.whole_module or not isinstance(patch.holder, types.ModuleType):
                continue
            if not sweepable(patch.original) or isinstance(patch.original, types.ModuleType):
                continue
            if getattr(patch.original, "__module__", None) != patch.holder.__name__:
                continue
            restore.setdefault(id(patch.installed), []).append((patch.installed, patch.original, patch.name))
            roots.add(patch.target.split(".")[0] + ".")
            impl_module = getattr(patch.installed, "__module__", None)
            if isinstance(impl_module, str):
                skip.add(impl_module)
        sites = frozenset((id(patch.holder), patch.name) for patch in patches)
        restore_later_imports(restore, modules_since(None), frozenset(skip), tuple(roots), sites)

    def _module_impl(self, fullname: str, registration: Registration) -> types.ModuleType | None:
        """The replacement module for a whole-module target, or None after reporting why not."""
        try:
            impl = self._load_impl(registration)
        except Exception as exc:  # noqa: BLE001  (plugin code: reported, not raised)
            return self._fail(fullname, registration, Status.IMPL_FAILED, f"{type(exc).__name__}: {exc}")
        if not isinstance(impl, types.ModuleType):
            return self._fail(
                fullname, registration, Status.IMPL_FAILED, f"target is a module, impl is a {type(impl).__name__}"
            )
        return impl

    def _record_module_patch(self, patch: AppliedPatch, detail: str) -> None:
        state = self._state(patch.target)
        state.module = patch.target.rpartition(".")[0]
        state.patches.append(patch)
        state.kind = Kind.MODULE
        state.late = patch.late
        state.set(Status.APPLIED, detail)

    def _provide_module(self, fullname: str, registration: Registration) -> types.ModuleType | None:
        """Called by the hook's loader in place of creating the upstream module."""
        impl = self._module_impl(fullname, registration)
        if impl is None:
            return None
        parent_name, _, child = fullname.rpartition(".")
        patch = AppliedPatch(
            target=fullname,
            holder=sys.modules.get(parent_name),
            name=child,
            kind=Kind.MODULE,
            previous_own=_NO_ORIGINAL,
            original=_NO_ORIGINAL,
            installed=impl,
            late=False,
            whole_module=True,
        )
        with self._lock:
            self._record_module_patch(patch, "replaced before its first import")
        return impl

    def _substitute_loaded_module(self, fullname: str, module: types.ModuleType) -> None:
        """Late whole-module replacement: the upstream module was imported already."""
        selection = self._select(fullname)
        state = self._state(fullname)
        if selection.chosen is None:
            self._record_unselected(state, selection)
            return
        state.chosen = selection.chosen
        if any(p.installed is module for p in state.patches):
            return  # already the replacement
        impl = self._module_impl(fullname, selection.chosen)
        if impl is None:
            return
        parent_name, _, child = fullname.rpartition(".")
        parent = sys.modules.get(parent_name)
        with self._lock:
            sys.modules[fullname] = impl
            previous_own = _NO_ORIGINAL
            if parent is not None:
                previous_own = vars(parent).get(child, _NO_ORIGINAL)
                setattr(parent, child, impl)
            patch = AppliedPatch(
                target=fullname,
                holder=parent,
                name=child,
                kind=Kind.MODULE,
                previous_own=previous_own,
                original=module,
                installed=impl,
                late=True,
                whole_module=True,
            )
            self._record_module_patch(patch, "applied after import")
        replacements = {id(module): (module, impl)}
        for alias_module, name, value in rebind_aliases(replacements, modules_since(None), frozenset({impl.__name__})):
            patch.aliases.append((alias_module, name, value))

    # ------------------------------------------------------------------ helpers
    def _state(self, target: str) -> TargetState:
        with self._lock:
            state = self._states.get(target)
            if state is None:
                state = self._states[target] = TargetState()
            return state

    def _select(self, target: str) -> Selection:
        return self.registry.select(target, self.vendors(), self.settings.disabled_targets)

    def _record_unselected(self, state: TargetState, selection: Selection) -> None:
        state.chosen = None
        if selection.disabled:
            state.set(Status.DISABLED, "named in FL_PATCH_DISABLE")
        else:
            state.set(Status.OTHER_VENDOR, f"no impl for vendors {', '.join(selection.vendors)}: upstream runs")

    def _load_impl(self, registration: Registration, *, fresh: bool = False) -> object:
        key = id(registration)
        cached = self._impls.get(key)
        if cached is not None and cached[0] is registration and not fresh:
            return cached[1]
        if fresh and isinstance(cached, tuple) and isinstance(cached[1], type):
            impl_module = sys.modules.get(cached[1].__module__)
            if impl_module is not None:
                importlib.reload(impl_module)
        impl = load_impl(registration.impl)
        self._impls[key] = (registration, impl)
        return impl

    def _fail(self, target: str, registration: Registration, status: Status, cause: str) -> None:
        state = self._state(target)
        state.set(status, cause)
        self.problems.problem(
            f"fl_patch: cannot patch {target} with {registration.impl_name} "
            f"(vendor {registration.vendor!r}, registered by {registration.source}): {cause}",
            where=registration.where,
        )
        return None

    # ------------------------------------------------------------------ queries and undo
    def original(self, target: str) -> object:
        state = self._states.get(target)
        if state is not None and state.patches:
            original = state.patches[-1].original
            if original is _NO_ORIGINAL:
                raise LookupError(
                    f"fl_patch.original({target!r}): the module was replaced before it was ever imported, "
                    "so there is no upstream object"
                )
            return unwrap(original)
        parts = tuple(target.split("."))
        for end in range(len(parts) - 1, 0, -1):
            module = sys.modules.get(".".join(parts[:end]))
            if not isinstance(module, types.ModuleType):
                continue
            attr_path = owned_path(module, parts)
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
        with self._lock:
            states = list(self._states.values())
            self._processed.clear()
        self._unbind_later_imports([p for state in states for p in state.patches])
        for state in reversed(states):
            for patch in reversed(state.patches):
                revert(patch)
            state.patches.clear()
            state.set(Status.WAITING, "")
            state.late = False
        self.problems.reset()

    def platform_detected(self) -> bool:
        return self._vendors is not None

    def records(self, *, detect: bool = True) -> list[PatchRecord]:
        """One record per registration. ``detect=False``: never import torch to find the
        platform (at interpreter exit, say); targets are then reported as waiting."""
        records: list[PatchRecord] = []
        undetected = not detect and self._vendors is None and "torch" not in sys.modules
        for target in self.registry.targets():
            if undetected:
                for registration in self.registry.registrations(target):
                    records.append(self._undetected_record(target, registration))
                continue
            selection = self._select(target)
            state = self._states.get(target)
            chosen = selection.chosen
            for registration in self.registry.registrations(target):
                if selection.disabled:
                    status, detail = Status.DISABLED, "named in FL_PATCH_DISABLE"
                elif registration is not chosen:
                    status = Status.OTHER_VENDOR
                    detail = (
                        f"vendor {chosen.vendor!r} chosen"
                        if chosen is not None
                        else f"no impl for vendors {', '.join(selection.vendors)}: upstream runs"
                    )
                elif state is None or state.chosen is not registration:
                    status = Status.WAITING
                    detail = "" if self.installed else "fl_patch is not installed"
                else:
                    status, detail = state.status, state.detail
                records.append(
                    PatchRecord(
                        target=target,
                        method_key=registration.method_key,
                        vendor=registration.vendor,
                        impl=registration.impl_name,
                        status=status,
                        detail=detail,
                        chosen_vendor=chosen.vendor if chosen is not None else None,
                        kind=state.kind.value if state is not None and state.kind is not None else None,
                        module=state.module if state is not None else None,
                        late=bool(state is not None and state.late and status is Status.APPLIED),
                        source=registration.source,
                    )
                )
        return records

    def _undetected_record(self, target: str, registration: Registration) -> PatchRecord:
        return PatchRecord(
            target=target,
            method_key=registration.method_key,
            vendor=registration.vendor,
            impl=registration.impl_name,
            status=Status.WAITING,
            detail="platform not detected yet (nothing imported torch or a target module)",
            source=registration.source,
        )

    def after_fork_in_child(self) -> None:
        self._lock = threading.RLock()
        self.registry.after_fork_in_child()
        self.problems.after_fork_in_child()

    def reset(self) -> None:
        """Forget every registration and state (tests; never while installed)."""
        self.revert_all()
        with self._lock:
            self.registry.clear()
            self._states.clear()
            self._impls.clear()
            self._vendors = None
            self._platform = None
            self._deferred = None
            self._executing.clear()
            self._pending.clear()


def _impl_module_initializing(registration: Registration | None) -> bool:
    """Whether the module a string impl lives in is being imported right now."""
    if registration is None or not isinstance(registration.impl, str):
        return False
    path = registration.impl.replace(":", ".").split(".")
    for end in range(len(path), 0, -1):
        module = sys.modules.get(".".join(path[:end]))
        if isinstance(module, types.ModuleType):
            return _initializing(module)
    return False


def _initializing(module: types.ModuleType) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _stale_subclass(impl: object, current: object, registration: Registration) -> bool:
    return (
        isinstance(registration.impl, str)
        and isinstance(impl, type)
        and isinstance(current, type)
        and impl is not current
        and not issubclass(impl, current)
        and any(
            base.__qualname__ == current.__qualname__ and base.__module__ == current.__module__ for base in impl.__mro__
        )
    )


def _megatron_version_note(target: str) -> str:
    return _installed_megatron_core() if target.startswith("megatron.") else ""


@functools.lru_cache(maxsize=1)
def _installed_megatron_core() -> str:
    try:
        from importlib.metadata import version

        return f" (installed megatron-core {version('megatron-core')})"
    except Exception:  # noqa: BLE001
        return ""
