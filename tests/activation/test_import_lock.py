"""No fl_patch work under the interpreter's global import lock (issue 43, item 3).

Three ordinary threaded programs that hung when fl_patch installed inside ``find_spec``: a thread
importing the standard library during the first megatron import (no fl_patch call in the program),
the first ``register()`` racing a thread's first megatron import, and a registry that waits on a
worker thread that imports. Each runs a few times here; ``bench/import_lock.py --runs 200`` runs
them many times (docs/reliability.md gives the figures).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "import_lock.py"
_spec = importlib.util.spec_from_file_location("import_lock_bench", BENCH)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("case", sorted(bench.CASES))
def test_threaded_programs_never_hang_around_installation(case: str) -> None:
    outcomes = [bench.run_once(case, timeout=180) for _ in range(3)]
    assert outcomes == ["ok"] * 3
