"""One registered target: its registrations, what is in place, how to undo it, what to report.

The registry holds one ``Target`` per dotted path (pluggy's ``HookCaller`` pattern). A target is
state: its registrations by vendor, which one was chosen, the patches in place, why others
failed. *Choosing and applying* is the engine's (``engine.applier``), which records its outcome
here through the ``record_*`` methods; ``records()`` turns the state into what ``report()`` shows,
and ``revert()`` undoes every patch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fl_patch.core.patch import ABSENT, NO_ORIGINAL, AppliedPatch, revert
from fl_patch.core.records import PatchRecord, Status
from fl_patch.core.resolve import unwrap

if TYPE_CHECKING:
    from fl_patch.core.registration import Registration
    from fl_patch.core.resolve import Kind

__all__ = ["CHANGES", "Changes", "Selection", "Target"]


class Changes:
    """How many times any target's recorded state changed (a registration added, a status set): what a caller that
    asks often (the rank check, at every process group) compares before building every record again."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def bump(self) -> None:
        self.count += 1  # (a lost increment under a race only makes a later caller recompute: never a stale answer
        #                   for long, since every status change bumps again)


CHANGES = Changes()


@dataclass(frozen=True)
class Selection:
    """The registrations that may run for one target, best first, and why others do not."""

    candidates: tuple[Registration, ...]  # registered for a vendor of the priority list, in its order
    vendors: tuple[str, ...]
    disabled: bool


class Target:
    """One target path, its registrations, and what happened to them."""

    def __init__(self, name: str, parts: tuple[str, ...]) -> None:
        self.name = name
        self.parts = parts
        self.method_key = f"{parts[-2]}.{parts[-1]}"  # FlagScale's key (``paths.method_key``)
        self._by_vendor: dict[str, Registration] = {}
        self.status = Status.WAITING
        self.detail = ""
        self.chosen: Registration | None = None  # the registration whose impl is in place
        self.kind: Kind | None = None
        self.module: str | None = None  # the module that owns the target, once it was imported
        self.late = False
        self.patches: list[AppliedPatch] = []
        self.failed: dict[int, str] = {}  # id(registration) -> why its impl could not be used
        self._impls: dict[int, tuple[Registration, object]] = {}  # id(registration) -> its loaded impl

    def __repr__(self) -> str:
        return f"<Target {self.name} {self.status.value}>"

    # ------------------------------------------------------------------ registrations
    def add(self, registration: Registration) -> Registration | None:
        """Add ``registration``; returns the one it replaces (same vendor), if any."""
        previous = self._by_vendor.get(registration.vendor)
        self._by_vendor[registration.vendor] = registration
        CHANGES.bump()
        if previous is not None:
            self._impls.pop(id(previous), None)
            self.failed.pop(id(previous), None)
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

    # ------------------------------------------------------------------ loaded impls
    def cached_impl(self, registration: Registration) -> object | None:
        cached = self._impls.get(id(registration))
        return cached[1] if cached is not None and cached[0] is registration else None

    def cache_impl(self, registration: Registration, impl: object) -> None:
        self._impls[id(registration)] = (registration, impl)

    def forget_loaded_impls(self) -> None:
        self._impls.clear()

    # ------------------------------------------------------------------ outcome (set by the engine)
    def record_applied(self, patch: AppliedPatch, registration: Registration, late: bool, detail: str) -> None:
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
        fell_back = [r for r in self.registrations() if id(r) in self.failed]
        if fell_back:
            failures = ", ".join(f"vendor {r.vendor!r} failed ({self.failed[id(r)]})" for r in fell_back)
            detail = "; ".join(filter(None, [detail, f"vendor {registration.vendor!r} used: {failures}"]))
        self.set(Status.APPLIED, detail)

    def record_failure(self, registration: Registration, status: Status, cause: str) -> None:
        self.failed[id(registration)] = cause
        self.set(status, cause)

    def record_unselected(self, selection: Selection) -> None:
        self.chosen = None
        if selection.disabled:
            self.set(Status.DISABLED, "named in FL_PATCH_DISABLE")
        else:
            self.set(Status.OTHER_VENDOR, f"no impl for vendors {', '.join(selection.vendors)}: upstream runs")

    def set(self, status: Status, detail: str) -> None:
        self.status = status
        self.detail = detail
        CHANGES.bump()

    def in_place_at(self, holder: object, name: str) -> AppliedPatch | None:
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
        self.failed.clear()
        self.set(Status.WAITING, "")

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

    def original_member(self, name: str) -> object:
        """Upstream's ``name`` on a redirected class target, where fl_patch set the impl's over it
        (a static or class method); LookupError where it did not."""
        for patch in reversed(self.patches):
            for change in patch.class_changes:
                if change.name != name:
                    continue
                if change.previous is not ABSENT:
                    return unwrap(change.previous)
                for klass in getattr(patch.installed, "__mro__", ())[1:]:  # it was inherited: the bases' is upstream's
                    if name in vars(klass):
                        return unwrap(vars(klass)[name])
        raise LookupError(f"{self.name}.{name}")

    # ------------------------------------------------------------------ reporting
    def records(self, vendors: tuple[str, ...], disabled: bool, installed: bool) -> list[PatchRecord]:
        selection = self.select(vendors, disabled)
        applied = self.chosen if self.chosen is not None and self.is_applied() else None
        expected = applied or next((r for r in selection.candidates if id(r) not in self.failed), None)
        if expected is None and selection.candidates:
            expected = selection.candidates[0]  # every candidate failed: the first is "the chosen one"
        records = []
        for registration in self.registrations():
            status, detail = self._status_of(registration, selection, expected, installed)
            records.append(
                PatchRecord(
                    target=self.name,
                    method_key=registration.method_key,
                    vendor=registration.vendor,
                    impl=registration.impl_name,
                    status=status,
                    detail=detail,
                    chosen_vendor=expected.vendor if expected is not None else None,
                    kind=self.kind.value if self.kind is not None else None,
                    module=self.module,
                    late=bool(self.late and status is Status.APPLIED),
                    source=registration.source,
                    requires=registration.requires,
                )
            )
        return records

    def _status_of(
        self, registration: Registration, selection: Selection, expected: Registration | None, installed: bool
    ) -> tuple[Status, str]:
        if selection.disabled:
            return Status.DISABLED, "named in FL_PATCH_DISABLE"
        if registration.gate is not None and not registration.for_this_version():
            return Status.NOT_FOR_VERSION, registration.gate.describe()
        failed = self.failed.get(id(registration))
        if failed is not None:
            return Status.IMPL_FAILED, failed
        if registration is expected:
            if self.status in (Status.APPLIED, Status.TARGET_MISSING) or (
                self.status is Status.WAITING and self.detail
            ):
                return self.status, self.detail
            return Status.WAITING, "" if installed else "fl_patch is not installed"
        if expected is not None:
            return Status.OTHER_VENDOR, f"vendor {expected.vendor!r} chosen"
        return Status.OTHER_VENDOR, f"no impl for vendors {', '.join(selection.vendors)}: upstream runs"

    def impl_failures(self) -> dict[str, str]:
        """vendor -> cause, for the registrations whose impl could not be used."""
        return {r.vendor: self.failed[id(r)] for r in self.registrations() if id(r) in self.failed}
