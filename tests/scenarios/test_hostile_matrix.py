"""The hostile-program table (tests/support/hostile/hostile_cases), one test per case.

Each case is an ordinary program that has broken import-time patching before; each class
of them has its invariant in docs/reliability.md. A case passes when, under fl_patch, it
exits as plain python would, prints what it must, says every fl_patch problem on stderr,
does not hang, and (where it has a problem) strict mode stops it. ``bench/fault_matrix.py``
runs the same table and tallies it.

The table has about 800 generated cases, each a real interpreter (two or three with the
launcher's re-exec and the plain-python comparison): about 15 CPU-minutes. By default this
file runs an even spread of each class, every k-th case of the class's generation order so
that every generated dimension is still crossed (``PER_CLASS`` cases per class at most);
``HOSTILE_CASES=all`` runs every case, as ``bench/fault_matrix.py --only hostile`` does.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support" / "hostile"))

from hostile_case import HostileCase, describe, judge, needs_strict_run, run_case
from hostile_cases import all_cases

PER_CLASS = 40


def _spread(cases: list[HostileCase]) -> list[HostileCase]:
    """Every case with ``HOSTILE_CASES=all``; else at most PER_CLASS per class, evenly spaced."""
    if os.environ.get("HOSTILE_CASES", "").strip().lower() == "all":
        return cases
    chosen: list[HostileCase] = []
    for group in dict.fromkeys(case.group for case in cases):
        mine = [case for case in cases if case.group == group]
        stride = max(1, math.ceil(len(mine) / PER_CLASS))
        chosen.extend(mine[::stride])
    return chosen


CASES = _spread(all_cases())


@pytest.mark.parametrize("case", CASES, ids=[case.label for case in CASES])
def test_hostile_case(case: HostileCase) -> None:
    default = run_case(case, strict=False)
    strict = run_case(case, strict=True) if needs_strict_run(case) else None
    failures = [kind for kind, failed in judge(case, default, strict).items() if failed]
    shown = describe(case, default, "default") + ("\n" + describe(case, strict, "strict") if strict else "")
    assert not failures, f"{', '.join(failures)}\n{shown}"
