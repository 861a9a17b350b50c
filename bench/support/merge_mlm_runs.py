"""Replace some files' outcomes in a ``bench/megatron_unit_tests.py`` JSON with a re-run's, saying why.

A fix found while a long run was going (a test dependency, a per-rank folder) is re-run on the files
it touches; this puts the re-run's per-test outcomes, details and per-file records in place of the
first run's for exactly those files, recomputes the summary, the transfer's regressions and gains (where
both modes ran) and the comparison with world size 1,
and records under ``reruns`` which files were replaced, why, and at which fl_patch revision.

    python bench/support/merge_mlm_runs.py BASE.json RERUN.json --why "..." [--compare WS1.json] -o OUT.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def merge(base: dict, rerun: dict, why: str, at_one: dict[str, str] | None) -> dict:
    for mode, records in rerun["per_file"].items():
        files = {r["file"] for r in records}
        outcomes = {k: v for k, v in base["outcomes"].get(mode, {}).items() if k.split("::", 1)[0] not in files}
        base["outcomes"][mode] = outcomes | rerun["outcomes"][mode]
        details = {k: v for k, v in base["details"].get(mode, {}).items() if k.split("::", 1)[0] not in files}
        base["details"][mode] = details | rerun["details"][mode]
        by_file = {r["file"]: r for r in records}
        known = {r["file"] for r in base["per_file"][mode]}
        # a re-run file replaces its first record; one the first run never started is added (and is no longer not_run)
        base["per_file"][mode] = [by_file.get(r["file"], r) for r in base["per_file"][mode]]
        base["per_file"][mode] += [r for r in records if r["file"] not in known]
        not_run = base.get("not_run") or {}
        if mode in not_run:
            not_run[mode] = [f for f in not_run[mode] if f not in files]
        counted = Counter(base["outcomes"][mode].values())
        base["summary"][mode] = {k: counted.get(k, 0) for k in OUTCOMES}
        base.setdefault("reruns", []).append(
            {"files": sorted(files), "why": why, "fl_patch_rev": rerun["fl_patch_rev"]}
        )
    if "off" in base["outcomes"] and "on" in base["outcomes"]:  # the transfer on against off, as the bench computes
        off, on = base["outcomes"]["off"], base["outcomes"]["on"]
        base["regressions"] = sorted(k for k, v in off.items() if v == "passed" and on.get(k) != "passed")
        base["gained"] = sorted(k for k, v in on.items() if v == "passed" and off.get(k) != "passed")
    if at_one is not None and "on" in base["outcomes"]:
        here = base["outcomes"]["on"]
        base["compared"] |= {
            "passed_at_world_size_1": sum(1 for k in here if at_one.get(k) == "passed"),
            "passed_here": sum(1 for v in here.values() if v == "passed"),
            "passed_here_not_at_1": sorted(k for k, v in here.items() if v == "passed" and at_one.get(k) != "passed"),
            "passed_at_1_not_here": sorted(k for k in here if at_one.get(k) == "passed" and here[k] != "passed"),
        }
    return base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("rerun", type=Path)
    parser.add_argument("--why", required=True)
    parser.add_argument("--compare", type=Path, help="the world-size-1 JSON to compare against")
    parser.add_argument("-o", "--out", type=Path, required=True)
    args = parser.parse_args()
    at_one = json.loads(args.compare.read_text())["outcomes"]["on"] if args.compare else None
    merged = merge(json.loads(args.base.read_text()), json.loads(args.rerun.read_text()), args.why, at_one)
    args.out.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    for mode, counts in merged["summary"].items():
        print(mode, counts, {k: len(v) if isinstance(v, list) else v for k, v in merged.get("compared", {}).items()})


if __name__ == "__main__":
    main()
