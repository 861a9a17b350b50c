"""Applying one target in one module: choose the registration, import its impl, decide, put it in place.

The engine calls this when a module that owns targets has loaded (or at once, for a module
loaded before). The whole path stays in this file and the core below it:

1. **choose** (``candidates``): the target's registrations in vendor order (``MG_FL_PREFER``, the
   detected platform, ``default``; ``core.vendors``), minus version gates and ``FL_PATCH_DISABLE``;
2. **find** the target in its module (``core.missing.locate``: FlagScale's key forms too);
3. **import the impl** (``core.resolve.load_impl``, inside ``core.import_state.plugin_window``):
   only now, so an impl module that subclasses the original gets the original;
4. **decide** (``core.kinds.decide``): the kind fits, the signature takes every call (renames
   are passed on, not refused) — the same function ``--check`` asks;
5. **build and put** (``core.patch``; a class: ``core.classes``), under the engine's lock;
6. **record** the outcome on the target (``Target.record_*``) and say a problem once
   (``core.errors.ProblemSink``: a warning, or in strict mode an error), also where the patch is in
   place but misses callers: a plugin's target that names a re-export (megatron's modules import it
   from its home), a callee TorchScript compiled before the patch.

A vendor whose impl cannot be used gives way to the next vendor's, said once.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import types
from collections.abc import Callable, Collection

from fl_patch.core.errors import ImplStillLoading, NotYet, PlatformNotReady, ProblemSink, is_stop_request
from fl_patch.core.kinds import decide, torchscript_callers
from fl_patch.core.missing import locate, names_lacking, reexported_from, unusable, upstream_mock, upstream_none
from fl_patch.core.patch import (
    NO_ORIGINAL,
    AppliedPatch,
    ImplMismatch,
    Wrap,
    build_replacement,
    module_patch,
    put,
    put_class,
    put_module,
    revert,
)
from fl_patch.core.records import Status
from fl_patch.core.registration import Registration, shipped
from fl_patch.core.registry import Registry
from fl_patch.core.resolve import Kind, Resolved, describe, load_impl, resolve_in
from fl_patch.core.target import Selection, Target
from fl_patch.core.vendors import VendorChoice

__all__ = ["Applier", "ClassWrap"]

ClassWrap = Callable[[str, type, type], type]


class _ImplCycle(ImplMismatch):
    """The impl names a registered target whose impl leads back here."""


class Applier:
    """Puts the chosen impl of a target in place; one per engine."""

    def __init__(
        self,
        registry: Registry,
        vendor_choice: VendorChoice,
        problems: ProblemSink,
        lock: threading.RLock,
        disabled_keys: Callable[[], Collection[str]],
    ) -> None:
        self.registry = registry
        self.vendor_choice = vendor_choice
        self.problems = problems
        self.lock = lock
        self._disabled_keys = disabled_keys
        # Wrappers around each function/method replacement before it is installed (report mode's
        # call counter, compare mode), in order; empty in a normal run: nothing is wrapped.
        self.wraps: list[Wrap] = []
        # For a class target: (target, impl, upstream class) -> the class to build instead of the impl
        # (compare mode's subclass carrying its wrappers); empty in a normal run.
        self.class_wraps: list[ClassWrap] = []

    # ------------------------------------------------------------------ choosing
    def vendors(self, among: Collection[str] | None = None) -> tuple[str, ...]:
        return self.vendor_choice.vendors(among)

    def disabled(self, target: Target) -> bool:
        keys = self._disabled_keys()
        return target.name in keys or target.method_key in keys

    def selection(self, target: Target) -> Selection:
        return target.select(self.vendors(target.vendors()), self.disabled(target))

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
            candidates = self.selection(following).candidates
            if not candidates:
                return None
            impl = candidates[0].impl
        return None

    # ------------------------------------------------------------------ applying
    def apply(
        self, target: Target, module: types.ModuleType, owner: str, attr_path: tuple[str, ...], *, late: bool
    ) -> AppliedPatch | None:
        """Put the best usable impl of ``target`` in place inside ``module`` (named ``owner``)."""
        target.module = owner
        selection = self.selection(target)
        if not selection.candidates:
            target.record_unselected(selection)
            return None
        first = selection.candidates[0]
        try:
            resolved, attr_path, note = locate(module, attr_path)
        except AttributeError as exc:
            self._missing(target, first, str(exc))
            return None
        existing = target.in_place_at(resolved.holder, resolved.name)
        if existing is not None and existing.registration is not None and existing.registration in selection.candidates:
            return None  # already in place: the same module body is not patched twice
        if existing is not None:
            # A later registration replaces our own impl: take ours out first, so that the new one is
            # built against upstream's object and its aliases are swept afresh.
            with self.lock:
                revert(existing)
            resolved = resolve_in(module, attr_path)
        if not any(r.create for r in selection.candidates):
            # (only now: saying why reads the module's source, which is not free)
            cause = unusable(module, attr_path, resolved, _version_note(target.name))
            if cause is not None:
                self._missing(target, first, cause)
                return None
        note = "; ".join(filter(None, [note, upstream_none(module, attr_path, resolved), upstream_mock(resolved)]))
        for registration in selection.candidates:
            if not resolved.exists and not registration.create:
                self._fail(target, registration, Status.TARGET_MISSING, f"no attribute {resolved.name!r}")
                continue
            try:
                impl = self._load(target, registration, current=resolved.raw if resolved.kind is Kind.CLASS else None)
                decision = decide(resolved, impl) if resolved.exists and not _is_mock(resolved.raw) else None
                if decision is not None and decision.refusal is not None:
                    raise ImplMismatch(decision.refusal)
                renames = decision.renames if decision is not None else {}
            except NotYet:
                raise
            except _ImplCycle as exc:  # one problem for every target of the loop: one message
                target.record_failure(registration, Status.IMPL_FAILED, str(exc))
                self.problems.problem(
                    f"fl_patch: {exc}; none of them is patched, upstream code runs", where=registration.where
                )
                continue
            except ImplMismatch as exc:
                self._fail(target, registration, Status.IMPL_FAILED, str(exc))
                continue
            except BaseException as exc:  # (plugin code: even its SystemExit is reported, not obeyed)
                if is_stop_request(exc):
                    raise  # Ctrl-C, or the program's signal handler: not the plugin's fault, not ours to eat
                self._fail(target, registration, Status.IMPL_FAILED, f"{type(exc).__name__}: {exc}")
                continue
            impl_module = _impl_module(registration, impl)
            with self.lock:
                if target.in_place_at(resolved.holder, resolved.name) is not None:
                    return None  # another thread put it in place meanwhile
                try:
                    notes: list[str] = []
                    if resolved.exists and resolved.kind is Kind.CLASS and not _is_mock(resolved.raw):
                        built = impl
                        for class_wrap in list(self.class_wraps):
                            built = class_wrap(target.name, built, resolved.raw)  # type: ignore[arg-type]
                        patch, notes = put_class(
                            target.name, resolved, built, late=late, registration=registration, owner=module,  # type: ignore[arg-type]
                            impl_module=impl_module,
                        )  # fmt: skip
                    else:
                        replacement = build_replacement(
                            target.name, resolved, impl, create=registration.create, renames=renames, wrap=self._wrap()
                        )
                        patch = put(
                            target.name, resolved, replacement, late=late, registration=registration, owner=module,
                            impl_module=impl_module,
                        )  # fmt: skip
                except ImplMismatch as exc:
                    self._fail(target, registration, Status.IMPL_FAILED, str(exc))
                    continue
                except (AttributeError, TypeError) as exc:
                    cause = f"cannot set {resolved.name!r} on {describe(resolved.holder)}: {exc}"
                    self._fail(target, registration, Status.IMPL_FAILED, cause)
                    continue
                adapted = (
                    f"keyword calls renamed for the impl ({', '.join(f'{a}={b}' for a, b in renames.items())})"
                    if renames
                    else ""
                )
                detail = "; ".join(filter(None, ["applied after import" if late else "", note, adapted, *notes]))
                target.record_applied(patch, registration, late, detail)
            home = self._reexport_home(module, attr_path, resolved, registration)
            if home is not None:  # (outside the lock: the problem may be a strict error)
                cause = (
                    f"it is a re-export of {home}: code that reaches it through {home.rpartition('.')[0]} (that "
                    f"module's own calls, modules that import it from there) keeps upstream's (register {home}, "
                    "which reaches every name bound to it)"
                )
                target.detail = "; ".join(filter(None, [target.detail, cause]))
                self.problems.problem(f"fl_patch: {target.name} is patched, but {cause}", where=registration.where)
            scripted = torchscript_callers(resolved.raw)
            if scripted:  # (outside the lock: the problem may be a strict error)
                cause = (
                    f"TorchScript compiled before the patch keeps calling the original: {', '.join(scripted)} "
                    "(torch.jit.script compiles its callees once; register those too, or script them after install)"
                )
                target.detail = "; ".join(filter(None, [target.detail, cause]))
                self.problems.problem(f"fl_patch: {target.name} is patched, but {cause}", where=registration.where)
            return patch
        return None

    def _reexport_home(
        self, module: types.ModuleType, attr_path: tuple[str, ...], resolved: Resolved, registration: Registration
    ) -> str | None:
        """The home of a plugin's target that names another megatron module's function or class, else None.

        Patching such a name reaches what imports it from there, not code that reaches it through its home. Said
        once, as ``--check`` says it; not where a plugin registers the home too (meant), nor for a shipped pack's
        (reviewed, deliberate: TE class names bound in each spec module)."""
        if shipped(registration.source):
            return None
        home = reexported_from(module, attr_path, resolved)
        if home is None or any(not shipped(r.source) for r in self.registry.registrations(home)):
            return None
        return home

    def _wrap(self) -> Wrap | None:
        wraps = list(self.wraps)
        if not wraps:
            return None

        def chained(target: str, function: types.FunctionType, upstream: object, kind: Kind) -> types.FunctionType:
            for wrap in wraps:
                function = wrap(target, function, upstream, kind)
            return function

        return chained

    # ------------------------------------------------------------------ whole modules
    def provide_module(
        self, target: Target, *, upstream_origin: str | None, has_upstream: bool
    ) -> types.ModuleType | None:
        """The replacement for a whole-module target, imported before its upstream module ever is
        (``upstream_origin``: the upstream module's source file, if there is one)."""
        try:
            vendors = self.vendors(target.vendors())
        except PlatformNotReady:
            cause = "its module was imported while torch itself was importing, before a vendor could be chosen"
            target.set(Status.WAITING, cause)
            self.problems.problem(f"fl_patch: cannot replace module {target.name}: {cause}; upstream code runs instead")
            return None
        selection = target.select(vendors, self.disabled(target))
        if not selection.candidates:
            target.record_unselected(selection)
            return None
        if not has_upstream and not any(r.create for r in selection.candidates):
            self._missing(target, selection.candidates[0], "no such module is installed")
            return None
        for registration in selection.candidates:
            impl = self._module_impl(target, registration, upstream_origin)
            if impl is None:
                continue
            patch = module_patch(
                target.name, impl, original=NO_ORIGINAL, previous_own=NO_ORIGINAL, late=False, registration=registration
            )
            with self.lock:
                target.record_applied(patch, registration, False, "replaced before its first import")
            return impl
        return None

    def substitute_loaded(self, target: Target, module: types.ModuleType) -> AppliedPatch | None:
        """Whole-module replacement of a module that was imported already."""
        selection = self.selection(target)
        if not selection.candidates:
            target.record_unselected(selection)
            return None
        if any(p.installed is module for p in target.patches):
            return None  # it is the replacement already
        for registration in selection.candidates:
            impl = self._module_impl(target, registration, getattr(module, "__file__", None))
            if impl is None:
                continue
            with self.lock:
                patch = put_module(target.name, module, impl, registration=registration)
                target.record_applied(patch, registration, True, "applied after import")
            return patch
        return None

    def _module_impl(
        self, target: Target, registration: Registration, upstream_origin: str | None
    ) -> types.ModuleType | None:
        try:
            impl = self._load(target, registration, current=None)
        except BaseException as exc:  # (plugin code, SystemExit included)
            if is_stop_request(exc):
                raise
            self._fail(target, registration, Status.IMPL_FAILED, f"{type(exc).__name__}: {exc}")
            return None
        if not isinstance(impl, types.ModuleType):
            self._fail(target, registration, Status.IMPL_FAILED, f"target is a module, impl is a {type(impl).__name__}")
            return None
        missing = names_lacking(upstream_origin, impl)
        if missing:
            # (--check says the same: core.missing.names_lacking is the one rule)
            cause = f"the replacement module lacks names the upstream module defines: {', '.join(missing)}"
            self._fail(target, registration, Status.IMPL_FAILED, cause)
            return None
        return impl

    # ------------------------------------------------------------------ importing impls
    def _load(self, target: Target, registration: Registration, *, current: object) -> object:
        cycle = self.impl_cycle(target, registration)
        if cycle is not None:
            raise _ImplCycle(f"the impls of registered targets form a cycle ({cycle})")
        cached = target.cached_impl(registration)
        if cached is not None and not _stale_subclass(cached, current, registration):
            return cached
        impl = _import_impl(registration)
        if _stale_subclass(impl, current, registration):
            # The target module was reloaded since the impl module was imported: the impl
            # subclasses the previous class object. Re-import the impl module, so that it
            # subclasses the current one.
            impl_module = sys.modules.get(impl.__module__)
            if impl_module is not None:
                importlib.reload(impl_module)
            impl = _import_impl(registration)
        target.cache_impl(registration, impl)
        return impl

    # ------------------------------------------------------------------ saying what happened
    def _fail(self, target: Target, registration: Registration, status: Status, cause: str) -> None:
        target.record_failure(registration, status, cause)
        self.problems.problem(
            f"fl_patch: cannot patch {target.name} with {registration.impl_name} "
            f"(vendor {registration.vendor!r}, registered by {registration.source}): {cause}"
            + self._fallback_note(target, registration),
            where=registration.where,
        )

    def _fallback_note(self, target: Target, failed: Registration) -> str:
        candidates = self.selection(target).candidates
        later = candidates[candidates.index(failed) + 1 :] if failed in candidates else ()
        if later:
            return f"; trying vendor {later[0].vendor!r} ({later[0].impl_name}) instead"
        if self.problems.strict:
            return ""  # strict: the run stops here, nothing runs instead
        return "; upstream code runs instead"

    def _missing(self, target: Target, registration: Registration, cause: str) -> None:
        target.set(Status.TARGET_MISSING, cause)
        self.problems.problem(
            f"fl_patch: cannot patch {target.name} with {registration.impl_name} "
            f"(vendor {registration.vendor!r}, registered by {registration.source}): {cause}",
            where=registration.where,
        )


def _import_impl(registration: Registration) -> object:
    try:
        return load_impl(registration.impl)
    except Exception as exc:
        loading = _impl_module_initializing(registration)
        if loading is not None:
            # It imported this target's module at its top (while loading the impl of another
            # target): its names are not all defined yet. Not broken: try once it has loaded.
            raise ImplStillLoading(f"its impl module {loading} is still loading", blocker=loading) from None
        blocker = _partially_initialized(exc)
        if blocker is not None:
            # The impl module imports a name from a module that is itself still loading further up
            # this import (megatron's modules import each other in circles; a target's module loads
            # early in that chain): not broken either, it is imported again once that one has loaded.
            raise ImplStillLoading(
                f"its impl imports from {blocker}, which is still loading", blocker=blocker
            ) from None
        raise


def _partially_initialized(exc: BaseException) -> str | None:
    """The module an ``ImportError`` names, if that module is loading right now (a circular import)."""
    name = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    module = sys.modules.get(name) if isinstance(name, str) else None
    if isinstance(module, types.ModuleType) and initializing(module):
        return name
    return None


def _impl_module(registration: Registration, impl: object) -> str | None:
    """The module the impl comes from (its own names to the original are never rebound)."""
    if isinstance(registration.impl, str):
        path = registration.impl.replace(":", ".")
        module = getattr(impl, "__module__", None)
        if isinstance(module, str) and path.startswith(module + "."):
            return module
        return path.rpartition(".")[0] or None
    module = getattr(impl, "__module__", None)
    return module if isinstance(module, str) else None


def _is_mock(raw: object) -> bool:
    mock = sys.modules.get("unittest.mock")
    return mock is not None and isinstance(raw, mock.NonCallableMock)


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
        and current not in impl.__mro__  # (not issubclass(): a non-runtime Protocol raises there)
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
