"""The oracle's registry: registers an identical copy (``oracle_impls``) for a selection of the catalogue.

Used as any plugin's registry: ``FL_PATCH_REGISTRY=oracle_registry`` with this directory on
``PYTHONPATH``. Strings only, vendor ``default``: each impl is imported once its target's module
has loaded. What is registered is read from the environment, so that every process of a job
(torchrun's workers, pytest's) registers the same set:

=====================  ======================================================================
``ORACLE_TARGETS``     a catalogue or selection JSON (default: ``oracle_targets.json`` here)
``ORACLE_KINDS``       comma-separated families: functions, methods, properties, classes (all)
``ORACLE_MODULES``     comma-separated module prefixes (all)
``ORACLE_EXCLUDE``     comma-separated targets, or prefixes ending in ``.``, left out
``ORACLE_SAMPLE``      N: a seeded random sample of N (``ORACLE_SEED``, 0); ``ORACLE_PER_FAMILY=1``: N of each
``ORACLE_OFF``         ``1``: register nothing (a reference run that still writes its report)
``ORACLE_REPORT``      a path (``{pid}`` is replaced): at exit, this process's status of every oracle
                       registration (``fl_patch.report()``) and the megatron modules it imported, as JSON
=====================  ======================================================================
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from pathlib import Path

import oracle_catalogue as catalogue

from fl_patch import register

_started = time.perf_counter()


def _selection() -> list[dict[str, str]]:
    if os.environ.get("ORACLE_OFF", "") == "1":
        return []
    data = catalogue.load(os.environ.get("ORACLE_TARGETS") or catalogue.CATALOGUE)
    return catalogue.select(
        data["entries"],  # type: ignore[arg-type]
        kinds=os.environ.get("ORACLE_KINDS"),
        modules=os.environ.get("ORACLE_MODULES"),
        exclude=os.environ.get("ORACLE_EXCLUDE"),
        sample=int(os.environ.get("ORACLE_SAMPLE") or 0),
        seed=int(os.environ.get("ORACLE_SEED") or 0),
        per_family=os.environ.get("ORACLE_PER_FAMILY", "") == "1",
    )


SELECTED = _selection()
LOAD_SECONDS = time.perf_counter() - _started  # reading the catalogue and selecting: the oracle's own cost
_started = time.perf_counter()
for _entry in SELECTED:
    register(_entry["target"], f"oracle_impls:{catalogue.impl_name(_entry['target'], _entry['form'])}")
REGISTER_SECONDS = time.perf_counter() - _started


def _write_report(path: str) -> None:
    import fl_patch

    records = {r.target: [r.status.value, r.detail, r.kind or ""] for r in fl_patch.report() if r.source == __name__}
    data = {
        "pid": os.getpid(),
        "rank": os.environ.get("RANK"),
        "argv": sys.argv[:3],
        "selected": len(SELECTED),
        "register_seconds": round(REGISTER_SECONDS, 4),
        "load_seconds": round(LOAD_SECONDS, 4),
        "build_seconds": round(getattr(sys.modules.get("oracle_impls"), "BUILD_SECONDS", [0.0])[0], 4),
        "records": records,
        "modules": sorted(m for m in sys.modules if m.split(".")[0] == "megatron"),
    }
    Path(path.replace("{pid}", str(os.getpid()))).write_text(json.dumps(data) + "\n", encoding="utf-8")


if os.environ.get("ORACLE_REPORT"):
    atexit.register(_write_report, os.environ["ORACLE_REPORT"])
