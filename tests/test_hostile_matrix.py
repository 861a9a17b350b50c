"""The hostile-program table (tests/support/hostile/hostile_cases), one test per case.

Each case is an ordinary program that has broken import-time patching before; each class
of them has its invariant in docs/reliability.md. A case passes when, under fl_patch, it
exits as plain python would, prints what it must, says every fl_patch problem on stderr,
does not hang, and (where it has a problem) strict mode stops it. ``bench/fault_matrix.py``
runs the same table and tallies it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support" / "hostile"))

from hostile_case import HostileCase, describe, judge, needs_strict_run, run_case
from hostile_cases import all_cases

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[case.label for case in CASES])
def test_hostile_case(case: HostileCase) -> None:
    default = run_case(case, strict=False)
    strict = run_case(case, strict=True) if needs_strict_run(case) else None
    failures = [kind for kind, failed in judge(case, default, strict).items() if failed]
    shown = describe(case, default, "default") + ("\n" + describe(case, strict, "strict") if strict else "")
    assert not failures, f"{', '.join(failures)}\n{shown}"
