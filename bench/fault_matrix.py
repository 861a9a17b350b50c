"""Fault matrix: every way a plugin can break, run for real, in default and strict mode.

Each case is a registry module with one broken registration (or a broken source),
run under ``python -m fl_patch`` on a small program that imports real megatron-core
and calls the upstream code the registration targets. Tallied:

* lost silently: the default-mode run printed no ``FlPatchWarning`` naming the
  target (or source) and the cause. Must be 0.
* non-strict run broken: the default-mode run exited non-zero. Must be 0.
* strict not failing: the ``FL_PATCH_STRICT=1`` run exited zero, or without the
  message. Must be 0.

Run:  .venv/bin/python bench/fault_matrix.py [--json out.json] [--jobs 2]
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
# The one fault table, shared with tests/test_faults.py.
SUPPORT_PATH = [SUPPORT, *(SUPPORT / group for group in ("activation", "plugins", "flagscale", "faults", "flaggems"))]
sys.path.insert(0, str(SUPPORT / "faults"))

from fault_table import FAULTS, Fault  # noqa: E402


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with ThreadPoolExecutor(args.jobs) as pool:
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
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "cases": rows}, indent=2))
    bad = summary["lost_silently"] + summary["non_strict_broken"] + summary["strict_not_failing"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
