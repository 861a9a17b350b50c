"""Two figures of docs/activation.md, measured: report mode's per-call cost, and what an audit hook would cost.

1. A patched call in report mode goes through the counting wrapper
   (``fl_patch.reporting.exit_report.make_counter``): ns per call of a trivial impl, plain and counted
   (``timeit``, median of ``--repeat`` runs of ``--number`` calls, interleaved).
2. Why fl_patch wraps the launch functions instead of adding an audit hook (PEP 578): how
   many audit events ``import megatron.core`` raises (under fl_patch, as a job imports it),
   and the CPU time of that import with a no-op audit hook and without (fresh interpreters,
   interleaved, medians).

Run:  .venv/bin/python bench/report_and_audit.py [--repeat 15] [--imports 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from fl_patch.reporting import exit_report as _exit_report  # noqa: E402

_IMPORT = """
import sys, time
events = [0]
if {hook}:
    def hook(event, args):
        events[0] += 1
    sys.addaudithook(hook)
import fl_patch
fl_patch.install()
start = time.process_time()
import megatron.core
import json
print(json.dumps({{"cpu_s": time.process_time() - start, "events": events[0]}}))
"""


def per_call(repeat: int, number: int) -> dict[str, float]:
    def impl(x: int) -> int:
        return x

    counted = _exit_report.make_counter("bench.target", impl)
    plain, wrapped = [], []
    for _ in range(repeat):
        plain.append(timeit.timeit(lambda: impl(1), number=number) / number * 1e9)
        wrapped.append(timeit.timeit(lambda: counted(1), number=number) / number * 1e9)
    return {"plain_ns": statistics.median(plain), "counted_ns": statistics.median(wrapped)}


def audit(imports: int) -> dict[str, float]:
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(imports):
        for hook in (False, True):
            out = subprocess.run(
                [sys.executable, "-c", _IMPORT.format(hook=hook)],
                capture_output=True, text=True, check=True, cwd=REPO,
                env={"PYTHONPATH": str(REPO / "src"), "PYTHONWARNINGS": "ignore", "PATH": "/usr/bin:/bin"},
            )  # fmt: skip
            runs[hook].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "events": statistics.median(r["events"] for r in runs[True]),
        "import_cpu_ms_without_hook": 1e3 * statistics.median(r["cpu_s"] for r in runs[False]),
        "import_cpu_ms_with_noop_hook": 1e3 * statistics.median(r["cpu_s"] for r in runs[True]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--imports", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps({**per_call(args.repeat, args.number), **audit(args.imports)}, indent=2))


if __name__ == "__main__":
    main()
