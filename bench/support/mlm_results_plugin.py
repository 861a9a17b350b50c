"""A pytest plugin for ``bench/megatron_unit_tests.py``: one JSON line per test outcome, written as it happens.

Loaded with ``-p mlm_results_plugin`` (this directory on ``PYTHONPATH``) into a pytest
run of Megatron-LM's unit tests. Each outcome is appended to the file named by
``FL_PATCH_MLM_RESULTS`` and flushed at once, so a run killed by its time limit still
leaves every outcome it reached. Outcomes: ``passed``, ``failed`` (the test body),
``error`` (setup or teardown failed), ``skipped``, ``xfailed``, ``xpassed``; a module that
fails to import is one ``error`` line with the module's path as its id.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

_outcomes: dict[str, str] = {}


@pytest.hookimpl(tryfirst=True)  # before pytest's tmpdir plugin reads --basetemp in its own pytest_configure
def pytest_configure(config: Any) -> None:
    """Under torchrun, one ``--basetemp`` per rank, side by side.

    Every rank is handed the same ``--basetemp``, and pytest empties that folder when it starts: a rank
    starting later deletes what an earlier one made there (``FileNotFoundError: .../basetemp/ignored``).
    Megatron-LM's ``tmp_path_dist_ckpt`` shares checkpoints through the folder *beside* basetemp
    (``mktemp('ignored').parent.parent / 'tmp_dist_ckpt'``), so a sibling per rank keeps that shared."""
    basetemp = getattr(config.option, "basetemp", None)
    if basetemp and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        config.option.basetemp = f"{basetemp}.rank{os.environ.get('RANK', '0')}"


def _write(nodeid: str, outcome: str, detail: str = "") -> None:
    path = os.environ.get("FL_PATCH_MLM_RESULTS")
    if not path:
        return
    # Under torchrun every rank runs the same tests: each writes its own file.
    path = path.replace("{rank}", os.environ.get("RANK", "0"))
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"id": nodeid, "outcome": outcome, "detail": detail[:300]}) + "\n")


def _detail(report: Any) -> str:
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0] if crash.message else ""
    longrepr = getattr(report, "longrepr", None)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        return str(longrepr[2])
    return str(longrepr or "").strip().splitlines()[-1] if longrepr else ""


def pytest_runtest_logreport(report: Any) -> None:
    """Record the outcome of a test once it is known (a failed setup or teardown is an error)."""
    nodeid = report.nodeid
    if report.when == "setup":
        if report.failed:
            _outcomes[nodeid] = "error"
            _write(nodeid, "error", _detail(report))
        elif report.skipped:
            outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
            _outcomes[nodeid] = outcome
            _write(nodeid, outcome, _detail(report))
    elif report.when == "call":
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        else:
            outcome = report.outcome  # passed, failed, skipped
        _outcomes[nodeid] = outcome
        if outcome != "passed":
            _write(nodeid, outcome, _detail(report))
    elif report.when == "teardown":
        before = _outcomes.get(nodeid)
        if report.failed and before != "error":
            _outcomes[nodeid] = "error"
            _write(nodeid, "error", "teardown: " + _detail(report))
        elif before == "passed":
            _write(nodeid, "passed")


def pytest_collectreport(report: Any) -> None:
    """A module (or class) that could not be collected is one error line."""
    if report.failed:
        _write(report.nodeid, "error", "collection: " + _detail(report))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """Under torchrun, a rank whose tests failed still exits 0 once they have all run.

    torchrun ends every worker as soon as one exits non-zero. A file's tests that need no peer (most of a
    file of single-process tests, run on every rank) finish at different times per rank: the first rank to
    finish with a failure (pytest's exit status 1) had the others killed mid-file, and their remaining
    outcomes were never written (12 of ``test_optimizer_cpu_offloading.py``'s 72 at 4 ranks). The
    outcomes are this plugin's record; the exit status only has to let the other ranks finish. Any other
    status (interrupted, internal error, usage error, no tests) is left as it is.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and exitstatus == pytest.ExitCode.TESTS_FAILED:
        session.exitstatus = pytest.ExitCode.OK
