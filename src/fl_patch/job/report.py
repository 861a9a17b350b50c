"""``--report`` in a job of many ranks: one merged view, printed by rank 0, instead of a copy per rank.

When report mode is on (to stderr, not a report file) and this process took part in the
rank check of its default process group, the exit report goes through that group's store:
each rank puts its records there at exit; rank 0 waits for the others (at most
``WAIT_S`` seconds: the report never holds a finished job for long), then prints
``merge.merge_reports`` of them, naming the ranks that did not report. A rank that cannot
reach the store (it is gone: rank 0 hosted it and has exited) prints its own report, as a
process outside any job does. ``--report-file`` keeps one JSON line per process;
``python -m fl_patch.job.merge FILE`` prints the same merged view from it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from fl_patch.core.records import PatchRecord
from fl_patch.job.merge import merge_reports, rank_ranges
from fl_patch.runtime import RUNTIME

__all__ = ["WAIT_S", "JobReport"]

WAIT_S = 10.0
_POLL_S = 0.05


class JobReport:
    """The exit report's sink for one rank of a job (``RUNTIME.report_sink``): True once the report is taken care of."""

    def __init__(self, store: Any, rank: int, world: int) -> None:
        self.store = store  # held: the store (and, on rank 0 of an env:// job, its server) outlives the process group
        self.rank = rank
        self.world = world
        self.prefix = f"fl_patch/report/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"

    def __call__(self, records: list[PatchRecord]) -> bool:
        from fl_patch.reporting.exit_report import record_dict  # report mode: loaded already

        entry = {"pid": os.getpid(), "rank": self.rank, "records": [record_dict(r) for r in records]}
        try:
            self.store.set(f"{self.prefix}entry/{self.rank}", json.dumps(entry))
            self.store.add(f"{self.prefix}count", 1)
            if self.rank != 0:
                return True
            return self._print_merged()
        except Exception:  # noqa: BLE001  (the store is gone: this process prints its own report)
            return False

    def _print_merged(self) -> bool:
        deadline = time.monotonic() + WAIT_S
        while self.store.add(f"{self.prefix}count", 0) < self.world and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        entries, missing = [], []
        for rank in range(self.world):
            key = f"{self.prefix}entry/{rank}"
            if self.store.check([key]):
                value = self.store.get(key)
                entries.append(json.loads(value.decode() if isinstance(value, bytes) else value))
            else:
                missing.append(rank)
        settings = RUNTIME.settings
        text = merge_reports(
            entries,
            show_all=bool(settings and settings.report_all),
            only=settings.report_only if settings is not None else (),
        )
        if missing:
            text += (
                f"\n{rank_ranges(missing)} did not report within {WAIT_S:g} s of rank 0's exit "
                "(a rank that cannot reach the job's store prints its own report)"
            )
        stream = sys.stderr
        if stream is None or stream.closed:
            return True
        stream.write(text + "\n")
        stream.flush()
        return True
