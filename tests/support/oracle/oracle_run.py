"""Running a program with and without the oracle, and reading what each process reported.

Shared by ``bench/oracle.py`` and ``tests/scenarios/test_oracle.py``. A run "with the oracle" is the same
command with ``FL_PATCH_REGISTRY=oracle_registry`` and a selection (``Selection``) in the
environment; "without" is the same registry with ``ORACLE_OFF=1`` (it registers nothing but
still writes its report, so both runs load exactly the same code). Each process writes
``ORACLE_REPORT`` at exit; ``Reports`` merges them.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import oracle_catalogue as catalogue

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


@dataclass(frozen=True)
class Selection:
    """Which catalogue entries a run registers (``oracle_registry``'s environment)."""

    kinds: str = ""
    modules: str = ""
    exclude: str = ""
    sample: int = 0
    seed: int = 0
    per_family: bool = False
    targets: str = ""  # a catalogue or selection file (default: the shipped catalogue)
    off: bool = False

    def env(self) -> dict[str, str]:
        values = {
            "ORACLE_KINDS": self.kinds,
            "ORACLE_MODULES": self.modules,
            "ORACLE_EXCLUDE": self.exclude,
            "ORACLE_SAMPLE": str(self.sample) if self.sample else "",
            "ORACLE_SEED": str(self.seed),
            "ORACLE_PER_FAMILY": "1" if self.per_family else "",
            "ORACLE_TARGETS": self.targets,
            "ORACLE_OFF": "1" if self.off else "",
        }
        return {k: v for k, v in values.items() if v}

    def entries(self) -> list[dict[str, str]]:
        """The entries this selection registers (what ``oracle_registry`` computes in each process)."""
        if self.off:
            return []
        data = catalogue.load(self.targets or catalogue.CATALOGUE)
        return catalogue.select(
            data["entries"],  # type: ignore[arg-type]
            kinds=self.kinds,
            modules=self.modules,
            exclude=self.exclude,
            sample=self.sample,
            seed=self.seed,
            per_family=self.per_family,
        )


OFF = Selection(off=True)


def oracle_vars(selection: Selection, report_dir: Path) -> dict[str, str]:
    """The variables that make a process register ``selection`` and report to ``report_dir``
    (``HERE`` must be on its ``PYTHONPATH``)."""
    return {
        "FL_PATCH_REGISTRY": "oracle_registry",
        "ORACLE_REPORT": str(report_dir / "oracle-{pid}.json"),
        **selection.env(),
    }


def oracle_env(base: dict[str, str], selection: Selection, report_dir: Path) -> dict[str, str]:
    """``base`` (an environment without fl_patch variables) with the oracle registry and ``selection``.

    ``PYTHONPATH`` gets this tree's ``src`` and the oracle's directory first."""
    env = {k: v for k, v in base.items() if not k.startswith("ORACLE_")}
    paths = [str(REPO / "src"), str(HERE)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(oracle_vars(selection, report_dir))
    return env


def _precedence(status: str) -> int:
    return 0 if status == "applied" else 2 if status == "waiting" else 1


@dataclass
class Reports:
    """What every process of one run reported (``oracle_registry._write_report``)."""

    processes: list[dict[str, object]] = field(default_factory=list)

    @classmethod
    def read(cls, report_dir: Path) -> Reports:
        found = []
        for path in sorted(report_dir.glob("oracle-*.json")):
            try:
                found.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError):
                continue  # a process killed while writing: it reported nothing
        return cls(found)

    def modules(self) -> set[str]:
        return {m for p in self.processes for m in p["modules"]}  # type: ignore[attr-defined]

    def statuses(self) -> dict[str, tuple[str, str]]:
        """One (status, detail) per target over all processes: applied where any process applied it;
        else a problem if any process had one; else waiting."""
        merged: dict[str, tuple[str, str]] = {}
        for process in self.processes:
            for target, (status, detail, _kind) in process["records"].items():  # type: ignore[attr-defined]
                before = merged.get(target)
                if before is None or _precedence(status) < _precedence(before[0]):
                    merged[target] = (status, detail)
        return merged

    def summary(self, entries: list[dict[str, str]]) -> dict[str, object]:
        """Counts per status and form, the problems, and targets left waiting though their module loaded."""
        statuses = self.statuses()
        modules = self.modules()
        by_status: Counter[str] = Counter()
        applied_by_form: Counter[str] = Counter()
        problems: dict[str, str] = {}
        waiting_loaded: list[str] = []
        for entry in entries:
            status, detail = statuses.get(entry["target"], ("not reported", ""))
            by_status[status] += 1
            if status == "applied":
                applied_by_form[entry["form"]] += 1
            elif status == "waiting":
                if entry["module"] in modules:
                    waiting_loaded.append(entry["target"])
            else:
                problems[entry["target"]] = f"{status}: {detail}"
        return {
            "processes": len(self.processes),
            "registered": len(entries),
            "by_status": dict(by_status),
            "applied_by_form": dict(sorted(applied_by_form.items())),
            "problems": problems,
            "waiting_though_module_loaded": waiting_loaded,
            # the largest per process: the oracle's catalogue reading, its register() loop, building its copies
            **{
                key: max((float(p.get(key, 0)) for p in self.processes), default=0.0)  # type: ignore[arg-type]
                for key in ("load_seconds", "register_seconds", "build_seconds")
            },
        }
