"""Fault matrix: every way a plugin can break, run for real, in default and strict mode.

Each case is a registry module with one broken registration (or a broken source),
run under ``python -m fl_patch`` on a small program that imports real megatron-core
and calls the upstream code the registration targets. Tallied:

* lost silently: the default-mode run printed no ``FlPatchWarning`` naming the
  target (or source) and the cause. Must be 0.
* non-strict run broken: the default-mode run exited non-zero. Must be 0.
* strict not failing: the ``FL_PATCH_STRICT=1`` run exited zero, or without the
  message. Must be 0.

Then every hostile program of ``tests/support/hostile/hostile_cases`` (the classes of
docs/reliability.md: never break the run, blast radius, as plain python, ...), tallied the
same way plus hangs: a case hung when it ran past its timeout.

Run:  .venv/bin/python bench/fault_matrix.py [--json out.json] [--jobs 2] [--only faults|hostile]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUPPORT = REPO / "tests" / "support"
# The one fault table, shared with tests/scenarios/test_faults.py.
SUPPORT_PATH = [SUPPORT, *(SUPPORT / group for group in ("activation", "plugins", "flagscale", "faults", "flaggems"))]
sys.path.insert(0, str(SUPPORT / "faults"))
sys.path.insert(0, str(SUPPORT / "hostile"))

from fault_table import FAULTS, Fault  # noqa: E402
from hostile_case import HostileCase, judge, needs_strict_run  # noqa: E402
from hostile_case import run_case as run_hostile  # noqa: E402
from hostile_cases import all_cases  # noqa: E402


def _environment(case: Fault, workdir: Path, strict: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k == "MG_FL_PREFER")}
    paths = [str(workdir), str(REPO / "src"), *map(str, SUPPORT_PATH)]
    if case.name == "broken entry point":
        dist = workdir / "fltest_broken_ep-1.0.dist-info"
        dist.mkdir(exist_ok=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fltest-broken-ep\nVersion: 1.0\n")
        (dist / "entry_points.txt").write_text(
            "[fl_patch.registries]\nvendor = fltest_broken.registry_missing_module\n"
        )
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONWARNINGS"] = "ignore::UserWarning:megatron,ignore::DeprecationWarning"
    env["FL_PATCH_ENTRY_POINTS"] = "0"
    env.update(case.env)
    if case.registry:
        env["FL_PATCH_REGISTRY"] = "fault_case_registry"
    if strict:
        env["FL_PATCH_STRICT"] = "1"
    return env


def run_case(case: Fault) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if case.registry:
            (workdir / "fault_case_registry.py").write_text(case.registry)
        (workdir / "program.py").write_text(textwrap.dedent(case.program))
        results: dict[str, object] = {"case": case.name}
        for mode in ("default", "strict"):
            env = _environment(case, workdir, strict=mode == "strict")
            proc = subprocess.run(
                [sys.executable, "-m", "fl_patch", str(workdir / "program.py")],
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=300,
            )
            output = proc.stdout + proc.stderr
            lines = [line for line in output.splitlines() if ("FlPatchWarning" in line or "FlPatchError" in line)]
            named = [line for line in lines if all(part in line for part in case.names)]
            results[mode] = {"exit": proc.returncode, "named": len(named), "ran": "PROGRAM-OK" in proc.stdout}
            if os.environ.get("FAULT_MATRIX_VERBOSE"):
                print(f"--- {case.name} [{mode}] exit {proc.returncode}\n{output[-3000:]}", file=sys.stderr)
        default, strict = results["default"], results["strict"]
        results["lost_silently"] = default["named"] == 0  # type: ignore[index]
        results["non_strict_broken"] = default["exit"] != 0 or not default["ran"]  # type: ignore[index]
        results["warned_once"] = default["named"] == 1  # type: ignore[index]
        results["strict_not_failing"] = strict["exit"] == 0 or strict["named"] == 0  # type: ignore[index]
        return results


def run_hostile_case(case: HostileCase) -> dict[str, object]:
    default = run_hostile(case, strict=False)
    strict = run_hostile(case, strict=True) if needs_strict_run(case) else None
    row: dict[str, object] = {"group": case.group, "case": case.name, "default_exit": default.rc}
    row["strict_exit"] = strict.rc if strict is not None else None
    row.update(judge(case, default, strict))
    if os.environ.get("FAULT_MATRIX_VERBOSE") and any(row[key] for key in HOSTILE_TALLIES):
        print(f"--- {case.label}: {row}\n{default.stderr[-3000:]}", file=sys.stderr)
    return row


HOSTILE_TALLIES = ("lost_silently", "non_strict_broken", "hung", "strict_wrong")


def _faults(jobs: int) -> tuple[list[dict[str, object]], dict[str, int]]:
    with ThreadPoolExecutor(jobs) as pool:
        rows = list(pool.map(run_case, FAULTS))
    print("| case | default: exit | default: warnings naming it | strict: exit |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['case']} | {row['default']['exit']} | {row['default']['named']} | {row['strict']['exit']} |")  # type: ignore[index]
    summary = {
        "cases": len(rows),
        "lost_silently": sum(bool(r["lost_silently"]) for r in rows),
        "non_strict_broken": sum(bool(r["non_strict_broken"]) for r in rows),
        "warned_more_than_once": sum(not r["warned_once"] and not r["lost_silently"] for r in rows),
        "strict_not_failing": sum(bool(r["strict_not_failing"]) for r in rows),
    }
    print()
    print(" ".join(f"{key}={value}" for key, value in summary.items()))
    return rows, summary


def _hostile(jobs: int) -> tuple[list[dict[str, object]], dict[str, object]]:
    cases = all_cases()
    with ThreadPoolExecutor(jobs) as pool:
        rows = list(pool.map(run_hostile_case, cases))
    print()
    print("| class | cases | lost silently | non-strict runs broken | hangs | strict runs wrong |")
    print("|---|---|---|---|---|---|")
    groups = sorted({str(row["group"]) for row in rows})
    for group in [*groups, "all"]:
        mine = [row for row in rows if group in ("all", row["group"])]
        counts = " | ".join(str(sum(bool(row[key]) for row in mine)) for key in HOSTILE_TALLIES)
        print(f"| {group} | {len(mine)} | {counts} |")
    failing = [f"{row['group']}: {row['case']}" for row in rows if any(row[key] for key in HOSTILE_TALLIES)]
    if failing:
        print("\nfailing: " + "; ".join(failing))
    summary: dict[str, object] = {
        "cases": len(rows),
        **{key: sum(bool(r[key]) for r in rows) for key in HOSTILE_TALLIES},
    }
    return rows, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", choices=("faults", "hostile"), help="run one of the two tables")
    args = parser.parse_args()
    result: dict[str, object] = {}
    bad = 0
    if args.only in (None, "faults"):
        rows, summary = _faults(args.jobs)
        result.update(summary=summary, cases=rows)
        bad += summary["lost_silently"] + summary["non_strict_broken"] + summary["strict_not_failing"]
    if args.only in (None, "hostile"):
        hostile_rows, hostile_summary = _hostile(args.jobs)
        result.update(hostile_summary=hostile_summary, hostile_cases=hostile_rows)
        bad += sum(int(hostile_summary[key]) for key in HOSTILE_TALLIES)  # type: ignore[call-overload]
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
