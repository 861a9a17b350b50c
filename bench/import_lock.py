"""Threaded programs around fl_patch's install, run many times: how many hang (issue 43, item 3).

Each program (tests/support/activation/import_lock/) is an ordinary threaded program that hung
when fl_patch installed inside ``find_spec`` (under CPython's global import lock):

- ``stdlib_thread``: a thread imports the standard library during the first megatron import;
- ``register_race``: the first ``register()`` in the main thread while a thread imports megatron;
- ``waiting_registry``: a registry module waits on a worker thread that imports.

    python bench/import_lock.py --runs 200 --jobs 2 [--timeout 120] [--json docs/bench_import_lock.json]

A run counts as a hang when it has not finished within ``--timeout`` seconds (a run takes a few
seconds: importing megatron-core); it is killed and counted. Any other failure is printed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = REPO / "tests" / "support" / "activation" / "import_lock"
PYTHONPATH = os.pathsep.join([str(PROGRAMS), str(REPO / "src"), str(REPO / "tests" / "support" / "plugins")])

CASES: dict[str, list[str]] = {
    "stdlib_thread": ["-m", "fl_patch", str(PROGRAMS / "stdlib_thread.py")],
    "register_race": ["-m", "fl_patch", "--packs", "cpu", str(PROGRAMS / "register_race.py")],
    "waiting_registry": [
        "-m",
        "fl_patch",
        "--registry",
        "waiting_registry",
        str(PROGRAMS / "waiting_registry_main.py"),
    ],
}


def run_once(case: str, timeout: float) -> str:
    """``ok``, ``hang`` or the last line of the failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_PATCH") and k != "MG_FL_PREFER"}
    env["PYTHONPATH"] = PYTHONPATH
    env["PYTHONWARNINGS"] = "ignore"
    try:
        proc = subprocess.run(
            [sys.executable, *CASES[case]], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
        )
    except subprocess.TimeoutExpired:
        return "hang"
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode == 0 and last == "ok":
        return "ok"
    return f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [last])[-1][:200]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results: dict[str, dict[str, int]] = {}
    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for case in args.cases.split(","):
            outcomes = list(pool.map(run_once, [case] * args.runs, [args.timeout] * args.runs))
            counts: dict[str, int] = {}
            for outcome in outcomes:
                counts[outcome] = counts.get(outcome, 0) + 1
            results[case] = counts
            print(f"{case:18s} {args.runs} runs: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    summary = {
        "runs": args.runs,
        "timeout_s": args.timeout,
        "results": results,
        "seconds": round(time.time() - started),
    }
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if all(set(c) == {"ok"} for c in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
