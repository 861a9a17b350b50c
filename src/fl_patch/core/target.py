"""One registered target: its registrations, which one runs, what is in place, how to undo it.

This is pluggy's ``HookCaller`` pattern: the registry holds one ``Target`` per dotted
path, and the target owns everything about it — choosing among its registrations
(``select``), putting the chosen impl in place (``apply``, ``provide_module``,
``substitute_loaded``), undoing it (``revert``) and saying what happened
(``records``). The engine only decides *when*: as the module that owns the target
finishes loading, or at once when it was loaded before.

Choosing is a fallback chain: the registrations of the vendors in priority order
(``MG_FL_PREFER``, the detected platform, ``default``) are tried one after the other,
so a vendor impl that cannot load gives way to the next vendor's (the CPU pack's,
say), said once. In strict mode the first failure is an error.

What the target needs from the engine (the vendor list, the problem sink, the call
counter of report mode, compare mode's hook, the lock) comes in as a ``PatchContext``.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import types
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Protocol

from fl_patch.core.apply import (
    ABSENT,
    NO_ORIGINAL,
    AppliedPatch,
    ImplMismatch,
    build_replacement,
    install,
    install_module,
    module_patch,
    revert,
)
from fl_patch.core.errors import ImplStillLoading, NotYet, PlatformNotReady, is_stop_request
from fl_patch.core.kinds import torchscript_callers
from fl_patch.core.missing import locate, unusable, upstream_mock, upstream_none
from fl_patch.core.records import Status
from fl_patch.core.resolve import Kind, Resolved, describe, load_impl, unwrap
from fl_patch.core.target_records import Selection, TargetRecords

if TYPE_CHECKING:
    from fl_patch.core.registration import Registration

__all__ = ["PatchContext", "Selection", "Target"]


class ImplCycle(ImplMismatch):
    """The impl names a registered target whose impl leads back here."""


class PatchContext(Protocol):
    """What a target needs from the engine that applies it."""

    lock: threading.RLock
    call_counter: Callable[[str, object], object] | None
    # compare mode's hook (fl_patch.compare.wrapper.wrap_for_compare): (target, replacement, original, kind)
    compare: Callable[[str, object, object, str], object] | None

    def vendors(self, among: Collection[str] | None = None) -> tuple[str, ...]: ...

    def disabled(self, target: Target) -> bool: ...

    def problem(self, message: str, where: tuple[str, int] | None) -> None: ...

    def impl_cycle(self, target: Target, registration: Registration) -> str | None: ...


class Target(TargetRecords):
    """One target path, its registrations, and what happened to them (the records are in ``TargetRecords``)."""

    def __init__(self, name: str, parts: tuple[str, ...]) -> None:
        self.name = name
        self.parts = parts
        self.method_key = f"{parts[-2]}.{parts[-1]}"  # FlagScale's key (``_targets.method_key``)
        self._by_vendor: dict[str, Registration] = {}
        self.status = Status.WAITING
        self.detail = ""
        self.chosen: Registration | None = None  # the registration whose impl is in place
        self.kind: Kind | None = None
        self.module: str | None = None  # the module that owns the target, once it was imported
        self.late = False
        self.patches: list[AppliedPatch] = []
        self._failed: dict[int, str] = {}  # id(registration) -> why its impl could not be used
        self._impls: dict[int, tuple[Registration, object]] = {}

    def __repr__(self) -> str:
        return f"<Target {self.name} {self.status.value}>"

    # ------------------------------------------------------------------ registrations
    def add(self, registration: Registration) -> Registration | None:
        """Add ``registration``; returns the one it replaces (same vendor), if any."""
        previous = self._by_vendor.get(registration.vendor)
        self._by_vendor[registration.vendor] = registration
        if previous is not None:
            self._impls.pop(id(previous), None)
            self._failed.pop(id(previous), None)
        return previous

    def registrations(self) -> list[Registration]:
        return list(self._by_vendor.values())

    def vendors(self) -> list[str]:
        return list(self._by_vendor)

    def select(self, vendors: tuple[str, ...], disabled: bool) -> Selection:
        if disabled:
            return Selection((), vendors, True)
        by_vendor = {v: r for v, r in self._by_vendor.items() if r.for_this_version()}  # version gates
        return Selection(tuple(by_vendor[v] for v in vendors if v in by_vendor), vendors, False)

    # ------------------------------------------------------------------ applying
    def apply(
        self, module: types.ModuleType, owner: str, attr_path: tuple[str, ...], ctx: PatchContext, *, late: bool
    ) -> AppliedPatch | None:
        """Put the best usable impl in place of the target inside ``module`` (named ``owner``)."""
        self.module = owner
        selection = self.select(ctx.vendors(self.vendors()), ctx.disabled(self))
        if not selection.candidates:
            self._unselected(selection)
            return None
        first = selection.candidates[0]
        try:
            resolved, attr_path, note = locate(module, attr_path)
        except AttributeError as exc:
            return self._missing(first, str(exc), ctx)  # type: ignore[func-returns-value]  # reports, and apply returns its None
        existing = self._in_place_at(resolved.holder, resolved.name)
        if existing is not None and existing.registration is not None and existing.registration in selection.candidates:
            return None  # already in place: the same module body is not patched twice
        if existing is None and not any(r.create for r in selection.candidates):
            # (only now: saying why reads the module's source, which is not free)
            cause = unusable(module, attr_path, resolved, _version_note(self.name))
            if cause is not None:
                return self._missing(first, cause, ctx)  # type: ignore[func-returns-value]  # reports, and apply returns its None
        if existing is None:
            note = "; ".join(filter(None, [note, upstream_none(module, attr_path, resolved), upstream_mock(resolved)]))
        if existing is not None:  # a re-registration replaces our own impl: keep the upstream original
            resolved = Resolved(resolved.holder, resolved.name, existing.original, existing.previous_own is not ABSENT)
        for registration in selection.candidates:
            if not resolved.exists and not registration.create:
                self._fail(registration, Status.TARGET_MISSING, f"no attribute {resolved.name!r}", ctx)
                continue
            try:
                impl = self._load(registration, ctx, current=resolved.raw if resolved.kind is Kind.CLASS else None)
                replacement = build_replacement(resolved, impl, create=registration.create)
            except NotYet:
                raise
            except ImplCycle as exc:  # one problem for every target of the loop: one message
                self._failed[id(registration)] = str(exc)
                self._set(Status.IMPL_FAILED, str(exc))
                ctx.problem(f"fl_patch: {exc}; none of them is patched, upstream code runs", registration.where)
                continue
            except ImplMismatch as exc:
                self._fail(registration, Status.IMPL_FAILED, str(exc), ctx)
                continue
            except BaseException as exc:  # (plugin code: even its SystemExit is reported, not obeyed)
                if is_stop_request(exc):
                    raise  # Ctrl-C, or the program's signal handler: not the plugin's fault, not ours to eat
                self._fail(registration, Status.IMPL_FAILED, f"{type(exc).__name__}: {exc}", ctx)
                continue
            replacement = _diagnostic_wrappers(ctx, self.name, resolved, replacement)
            with ctx.lock:
                if self._in_place_at(resolved.holder, resolved.name) not in (None, existing):
                    return None  # another thread put it in place meanwhile
                try:
                    patch = install(
                        self.name, resolved, replacement, late=late, registration=registration, owner=module
                    )
                except (AttributeError, TypeError) as exc:
                    cause = f"cannot set {resolved.name!r} on {describe(resolved.holder)}: {exc}"
                    self._fail(registration, Status.IMPL_FAILED, cause, ctx)
                    continue
                if existing is not None:
                    patch.previous_own = existing.previous_own
                detail = "; ".join(filter(None, ["applied after import" if late else "", note]))
                self._applied(patch, registration, late, detail)
            scripted = torchscript_callers(resolved.raw)
            if scripted:  # (outside the lock: the problem may be a strict error)
                cause = (
                    f"TorchScript compiled before the patch keeps calling the original: {', '.join(scripted)} "
                    "(torch.jit.script compiles its callees once; register those too, or script them after install)"
                )
                self.detail = "; ".join(filter(None, [self.detail, cause]))
                ctx.problem(f"fl_patch: {self.name} is patched, but {cause}", registration.where)
            return patch
        return None

    def provide_module(self, ctx: PatchContext, *, has_upstream: bool) -> types.ModuleType | None:
        """The replacement for a whole-module target, imported before its upstream module ever is."""
        try:
            vendors = ctx.vendors(self.vendors())
        except PlatformNotReady:
            cause = "its module was imported while torch itself was importing, before a vendor could be chosen"
            self._set(Status.WAITING, cause)
            ctx.problem(f"fl_patch: cannot replace module {self.name}: {cause}; upstream code runs instead", None)
            return None
        selection = self.select(vendors, ctx.disabled(self))
        if not selection.candidates:
            self._unselected(selection)
            return None
        if not has_upstream and not any(r.create for r in selection.candidates):
            self._missing(selection.candidates[0], "no such module is installed", ctx)
            return None
        for registration in selection.candidates:
            impl = self._module_impl(registration, ctx)
            if impl is None:
                continue
            patch = module_patch(
                self.name, impl, original=NO_ORIGINAL, previous_own=NO_ORIGINAL, late=False, registration=registration
            )
            with ctx.lock:
                self._applied(patch, registration, False, "replaced before its first import")
            return impl
        return None

    def substitute_loaded(self, module: types.ModuleType, ctx: PatchContext) -> AppliedPatch | None:
        """Whole-module replacement of a module that was imported already."""
        selection = self.select(ctx.vendors(self.vendors()), ctx.disabled(self))
        if not selection.candidates:
            self._unselected(selection)
            return None
        if any(p.installed is module for p in self.patches):
            return None  # it is the replacement already
        for registration in selection.candidates:
            impl = self._module_impl(registration, ctx)
            if impl is None:
                continue
            with ctx.lock:
                patch = install_module(self.name, module, impl, registration=registration)
                self._applied(patch, registration, True, "applied after import")
            return patch
        return None

    def _module_impl(self, registration: Registration, ctx: PatchContext) -> types.ModuleType | None:
        try:
            impl = self._load(registration, ctx, current=None)
        except BaseException as exc:  # (plugin code, SystemExit included)
            if is_stop_request(exc):
                raise
            self._fail(registration, Status.IMPL_FAILED, f"{type(exc).__name__}: {exc}", ctx)
            return None
        if not isinstance(impl, types.ModuleType):
            self._fail(registration, Status.IMPL_FAILED, f"target is a module, impl is a {type(impl).__name__}", ctx)
            return None
        return impl

    def _load(self, registration: Registration, ctx: PatchContext, *, current: object) -> object:
        cycle = ctx.impl_cycle(self, registration)
        if cycle is not None:
            raise ImplCycle(f"the impls of registered targets form a cycle ({cycle})")
        cached = self._impls.get(id(registration))
        if cached is not None and cached[0] is registration and not _stale_subclass(cached[1], current, registration):
            return cached[1]
        impl = self._import_impl(registration)
        if _stale_subclass(impl, current, registration):
            # The target module was reloaded since the impl module was imported: the impl
            # subclasses the previous class object. Re-import the impl module, so that it
            # subclasses the current one.
            impl_module = sys.modules.get(impl.__module__)
            if impl_module is not None:
                importlib.reload(impl_module)
            impl = self._import_impl(registration)
        self._impls[id(registration)] = (registration, impl)
        return impl

    @staticmethod
    def _import_impl(registration: Registration) -> object:
        try:
            return load_impl(registration.impl)
        except Exception:
            loading = _impl_module_initializing(registration)
            if loading is not None:
                # It imported this target's module at its top (while loading the impl of another
                # target): its names are not all defined yet. Not broken: try once it has loaded.
                raise ImplStillLoading(f"its impl module {loading} is still loading", blocker=loading) from None
            raise

    # ------------------------------------------------------------------ outcome
    def _applied(self, patch: AppliedPatch, registration: Registration, late: bool, detail: str) -> None:
        kept = []
        for old in self.patches:  # a reload or re-import patches a fresh body: the old record goes
            if old.holder is patch.holder and old.name == patch.name:
                patch.aliases.extend(old.aliases)
                patch.later_bindings.extend(old.later_bindings)
            elif old.is_dead():
                continue  # its module was purged and collected: nothing left to undo
            else:
                kept.append(old)
        self.patches = [*kept, patch]
        self.chosen = registration
        self.kind = patch.kind
        self.late = late
        fell_back = [r for r in self.registrations() if id(r) in self._failed]
        if fell_back:
            detail = "; ".join(
                filter(None, [detail, f"vendor {registration.vendor!r} used: " + _failures(self, fell_back)])
            )
        self._set(Status.APPLIED, detail)

    def _fail(self, registration: Registration, status: Status, cause: str, ctx: PatchContext) -> None:
        self._failed[id(registration)] = cause
        self._set(status, cause)
        ctx.problem(
            f"fl_patch: cannot patch {self.name} with {registration.impl_name} "
            f"(vendor {registration.vendor!r}, registered by {registration.source}): {cause}"
            + self._fallback_note(registration, ctx),
            registration.where,
        )

    def _fallback_note(self, failed: Registration, ctx: PatchContext) -> str:
        candidates = self.select(ctx.vendors(self.vendors()), ctx.disabled(self)).candidates
        later = candidates[candidates.index(failed) + 1 :] if failed in candidates else ()
        if later:
            return f"; trying vendor {later[0].vendor!r} ({later[0].impl_name}) instead"
        return "; upstream code runs instead"

    def _missing(self, registration: Registration, cause: str, ctx: PatchContext) -> None:
        self._set(Status.TARGET_MISSING, cause)
        ctx.problem(
            f"fl_patch: cannot patch {self.name} with {registration.impl_name} "
            f"(vendor {registration.vendor!r}, registered by {registration.source}): {cause}",
            registration.where,
        )

    def _unselected(self, selection: Selection) -> None:
        self.chosen = None
        if selection.disabled:
            self._set(Status.DISABLED, "named in FL_PATCH_DISABLE")
        else:
            self._set(Status.OTHER_VENDOR, f"no impl for vendors {', '.join(selection.vendors)}: upstream runs")

    def _set(self, status: Status, detail: str) -> None:
        self.status = status
        self.detail = detail

    def _in_place_at(self, holder: object, name: str) -> AppliedPatch | None:
        for patch in self.patches:
            if patch.holder is holder and patch.name == name and patch.is_in_place():
                return patch
        return None

    def is_applied(self) -> bool:
        return any(patch.is_in_place() for patch in self.patches)

    # ------------------------------------------------------------------ undo and queries
    def revert(self) -> None:
        for patch in reversed(self.patches):
            revert(patch)
        self.patches.clear()
        self.chosen = None
        self.late = False
        self._failed.clear()
        self._set(Status.WAITING, "")

    def forget_loaded_impls(self) -> None:
        self._impls.clear()

    def original(self) -> object:
        """The upstream object behind the patch in place (LookupError if there is none)."""
        for patch in reversed(self.patches):
            if patch.original is NO_ORIGINAL:
                raise LookupError(
                    f"fl_patch.original({self.name!r}): the module was replaced before it was ever imported, "
                    "so there is no upstream object"
                )
            return unwrap(patch.original)
        raise LookupError(self.name)


def _diagnostic_wrappers(ctx: PatchContext, name: str, resolved: Resolved, replacement: object) -> object:
    """What is installed for ``replacement``: itself, or wrapped by compare mode and/or report mode's counter.

    Each hook is None unless its mode is on: then nothing is wrapped and a patched call costs a call of the impl.
    """
    if ctx.compare is not None and resolved.exists:
        replacement = ctx.compare(name, replacement, resolved.raw, resolved.kind.value)
    if ctx.call_counter is not None and resolved.kind in (Kind.FUNCTION, Kind.METHOD):
        replacement = ctx.call_counter(name, replacement)
    return replacement


def _failures(target: Target, failed: list[Registration]) -> str:
    return ", ".join(f"vendor {r.vendor!r} failed ({target._failed[id(r)]})" for r in failed)


def _impl_module_initializing(registration: Registration) -> str | None:
    """The name of the module a string impl lives in, if it is being imported right now."""
    if not isinstance(registration.impl, str):
        return None
    path = registration.impl.replace(":", ".").split(".")
    for end in range(len(path), 0, -1):
        name = ".".join(path[:end])
        module = sys.modules.get(name)
        if isinstance(module, types.ModuleType):
            return name if initializing(module) else None
    return None


def initializing(module: types.ModuleType) -> bool:
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


def _version_note(target: str) -> str:
    return _installed_megatron_core() if target.startswith("megatron.") else ""


@functools.lru_cache(maxsize=1)
def _installed_megatron_core() -> str:
    try:
        from importlib.metadata import version

        return f" (installed megatron-core {version('megatron-core')})"
    except Exception:  # noqa: BLE001
        return ""
