"""The hostile-program table: ordinary programs that have broken import-time patching.

One module per class of failure in ``docs/reliability.md`` (``never_break``,
``blast_radius``, ``plain_python``, ``saying``, ...), each a list ``CASES`` of
:class:`~hostile_case.HostileCase`. ``bench/fault_matrix.py`` runs every case for real, in
default and in strict mode, and tallies what was lost silently, broke a run that did not ask
for strict mode, hung, or was not stopped by strict mode; ``tests/scenarios/test_hostile_matrix.py``
runs the same cases, one test each. One table, so the bench and the tests cannot drift.
"""

from __future__ import annotations

import importlib
import pkgutil

from hostile_case import HostileCase

__all__ = ["all_cases"]


def all_cases() -> list[HostileCase]:
    """Every case of every class module here, in module order."""
    cases: list[HostileCase] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        cases.extend(module.CASES)
    names = [f"{case.group}: {case.name}" for case in cases]
    duplicates = {name for name in names if names.count(name) > 1}
    if duplicates:
        raise ValueError(f"hostile cases named twice: {sorted(duplicates)}")
    return cases
