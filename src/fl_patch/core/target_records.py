"""What a target reports: one ``PatchRecord`` per registration, and which registration was chosen.

Apart from ``Target`` (``core/target.py``) so that the class that applies stays one concern;
``Selection`` (the registrations eligible on this machine, in priority order) lives here
because both read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fl_patch.core.records import PatchRecord, Status

if TYPE_CHECKING:
    from fl_patch.core.registration import Registration
    from fl_patch.core.resolve import Kind

__all__ = ["Selection", "TargetRecords"]


@dataclass(frozen=True)
class Selection:
    """The registrations that may run for one target, best first, and why others do not."""

    candidates: tuple[Registration, ...]  # registered for a vendor of the priority list, in its order
    vendors: tuple[str, ...]
    disabled: bool


class TargetRecords:
    """The reporting part of ``Target``; the state it reads is set by ``Target.__init__``."""

    if TYPE_CHECKING:  # for the type checker only: what Target.__init__ sets and the Target methods read here
        name: str
        status: Status
        detail: str
        chosen: Registration | None
        kind: Kind | None
        module: str | None
        late: bool
        _failed: dict[int, str]

        def registrations(self) -> list[Registration]: ...

        def select(self, vendors: tuple[str, ...], disabled: bool) -> Selection: ...

        def is_applied(self) -> bool: ...

    def records(self, vendors: tuple[str, ...], disabled: bool, installed: bool) -> list[PatchRecord]:
        selection = self.select(vendors, disabled)
        applied = self.chosen if self.chosen is not None and self.is_applied() else None
        expected = applied or next((r for r in selection.candidates if id(r) not in self._failed), None)
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
        failed = self._failed.get(id(registration))
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
        return {r.vendor: self._failed[id(r)] for r in self.registrations() if id(r) in self._failed}
