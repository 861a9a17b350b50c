"""What ``report()`` returns: one record per registration, with its status."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum

__all__ = ["PatchRecord", "Status"]


class Status(str, Enum):
    APPLIED = "applied"
    WAITING = "waiting"  # the target's module has not been imported (or fl_patch is not installed)
    TARGET_MISSING = "target missing"
    IMPL_FAILED = "impl failed"
    DISABLED = "disabled"
    OTHER_VENDOR = "other vendor chosen"
    NOT_FOR_VERSION = "not for this version"  # its requires= gate excludes the installed release

    @property
    def is_problem(self) -> bool:
        return self in (Status.TARGET_MISSING, Status.IMPL_FAILED)


@dataclass(frozen=True)
class PatchRecord:
    target: str
    method_key: str
    vendor: str  # the vendor this registration was made for
    impl: str
    status: Status
    detail: str = ""  # the cause of a problem, "applied after import", the chosen vendor...
    chosen_vendor: str | None = None  # the vendor whose impl runs for this target, if any
    kind: str | None = None  # function, method, staticmethod, classmethod, class, module, ...
    module: str | None = None  # the module that owns the target, once it was imported
    late: bool = False  # applied to a module imported before fl_patch was installed
    calls: int | None = None  # calls counted through the patch (FL_PATCH_REPORT=1 only)
    source: str = "?"  # the registry module or pack that registered it
    requires: str | None = None  # its version gate, if any

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["status"] = self.status.value
        return data
