"""What the compare found, per target: counts, the worst errors, the verdict, or why nothing was compared.

One ``TargetResult`` per target, kept for the process (``RESULTS``), filled by the wrappers
(``wrapper.py``) and read at exit (``table.py``). Each record is self-contained and merges with the
same target's record from another rank (``merge``): counts add up, errors take their worst, the
verdict its worst, so a per-rank report merges by target without knowing how it was made.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fl_patch.compare.metrics import TensorDiff

__all__ = ["DIFFERS", "MATCH", "NEVER_CALLED", "NOT_COMPARED", "RESULTS", "Results", "TargetResult", "merge"]

MATCH, DIFFERS, NOT_COMPARED = "match", "differs", "not compared"
NEVER_CALLED = "never called in this process"
_ORDER = {DIFFERS: 0, MATCH: 1, NOT_COMPARED: 2}
MAX_SHAPES = 4  # distinct (dtype, shape) kept per target: what it was compared on, not a log


@dataclass
class TargetResult:
    target: str
    kind: str
    calls: int = 0  # calls compared (the original ran and its result was compared)
    seen: int = 0  # calls the wrapper looked at (within the first N)
    leaves: int = 0  # tensors and numbers compared, over all calls
    max_abs: float | None = None
    max_rel: float | None = None
    cosine: float | None = None  # the least over every compared leaf
    differs: bool = False
    warning: bool = False  # msprobe's "warning": within the error thresholds, outside the stricter ones
    worst: str = ""  # the leaf that decided: "call 2, grad of param weight: ..."
    reasons: list[str] = field(default_factory=list)  # why calls (or all of them) were not compared
    shapes: list[str] = field(default_factory=list)  # "float32[2x4x64]"
    stopped: bool = False  # no more runs of the original: it communicates or writes program state
    _worst: tuple[bool, float] = (False, -1.0)  # the worst leaf so far: a difference first, then the larger error

    @property
    def verdict(self) -> str:
        if self.differs:
            return DIFFERS
        return MATCH if self.calls else NOT_COMPARED

    def note(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def add_call(self, call: int, diffs: list[TensorDiff]) -> TensorDiff | None:
        """Record one compared call; returns its first differing leaf when this is the target's first difference."""
        self.calls += 1
        first: TensorDiff | None = None
        for diff in diffs:
            self.leaves += 1
            shape = f"{diff.dtype}[{'x'.join(map(str, diff.shape))}]"
            if shape not in self.shapes and len(self.shapes) < MAX_SHAPES:
                self.shapes.append(shape)
            self.max_abs = max(self.max_abs or 0.0, diff.max_abs)
            self.max_rel = max(self.max_rel or 0.0, diff.max_rel)
            if diff.cosine is not None:
                self.cosine = diff.cosine if self.cosine is None else min(self.cosine, diff.cosine)
            self.warning = self.warning or diff.warning
            rank = (diff.differs, diff.max_rel)
            if rank > self._worst:
                self._worst = rank
                self.worst = f"call {call}, {diff.describe()}"
            if diff.differs and not self.differs and first is None:
                first = diff
        if first is not None:
            self.differs = True
        return first

    def as_record(self) -> dict[str, object]:
        """The JSON record (``table.py`` adds vendor and impl from the engine's records)."""
        return {
            "target": self.target,
            "kind": self.kind,
            "calls": self.calls,
            "calls_seen": self.seen,
            "verdict": self.verdict,
            "status": "error" if self.differs else ("warning" if self.warning else ("pass" if self.calls else None)),
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "cosine": self.cosine,
            "leaves": self.leaves,
            "worst": self.worst or None,
            "shapes": list(self.shapes),
            "reason": "; ".join(self.reasons) or (None if self.seen else NEVER_CALLED),
        }


class Results:
    """Every target's result in this process (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_target: dict[str, TargetResult] = {}

    def get(self, target: str, kind: str) -> TargetResult:
        with self.lock:
            result = self.by_target.get(target)
            if result is None:
                result = self.by_target[target] = TargetResult(target, kind)
            return result

    def reset(self) -> None:
        with self.lock:
            self.by_target.clear()


RESULTS = Results()


def merge(records: list[dict[str, object]]) -> list[dict[str, object]]:
    """Records of one target from several processes (ranks) merged into one per target, in first-seen order.

    Counts add up; ``max_abs`` and ``max_rel`` take the largest, ``cosine`` the least; the verdict
    is the worst (differs over match over not compared); reasons are joined; the other fields
    (vendor, impl, kind) come from the first record. ``ranks`` lists where each came from.
    """
    merged: dict[str, dict[str, object]] = {}
    for record in records:
        target = str(record["target"])
        into = merged.get(target)
        if into is None:
            merged[target] = {**record, "ranks": [record.get("rank")]}
            continue
        into["ranks"] = [*into["ranks"], record.get("rank")]  # type: ignore[misc]
        for key in ("calls", "calls_seen", "leaves"):
            into[key] = int(into.get(key) or 0) + int(record.get(key) or 0)  # type: ignore[call-overload]
        for key, pick in (("max_abs", max), ("max_rel", max), ("cosine", min)):
            values = [v for v in (into.get(key), record.get(key)) if v is not None]
            into[key] = pick(values) if values else None  # type: ignore[type-var]
        if _ORDER[str(record["verdict"])] < _ORDER[str(into["verdict"])]:
            into["verdict"], into["worst"], into["status"] = (
                record["verdict"],
                record.get("worst"),
                record.get("status"),
            )
        reasons = [r for r in (into.get("reason"), record.get("reason")) if r]
        into["reason"] = "; ".join(dict.fromkeys(str(r) for r in reasons)) or None
    return list(merged.values())
