"""Merge the per-run JSONs of ``tests/support/flaggems/gems_gpt.py`` (one directory) into one file.

The GPU benches (``bench/gpu_te_moe.sh``, ``bench/gpu_cuda_graph.sh``) write one JSON per run; only a few
files come back from the device, so they are merged here, without fl_patch's per-target report, and one
summary line per run is printed: step time, throughput, MFU, memory, first step, fallbacks, every
``--loss-every``-th loss.

    python3 bench/support/merge_gems_runs.py RUNS_DIR OUT.json [--loss-every N]
"""

from __future__ import annotations

import argparse
import glob
import json
import os

SUMMARY = (
    "step_s_median",
    "microbatches",
    "optimizer_step_ms_median",
    "tokens_per_s",
    "tflops_6N",
    "mfu_989",
    "peak_mem_gb",
    "active_params",
    "first_step_s",
    "fallbacks",
    "fp8_recipe",
    "fp8_summary",
    "device_name",
    "gpu_clocks",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs")
    parser.add_argument("out")
    parser.add_argument("--loss-every", type=int, default=4)
    args = parser.parse_args()
    merged = {}
    for path in sorted(glob.glob(os.path.join(args.runs, "*.json"))):
        with open(path) as f:
            run = json.load(f)
        name = os.path.basename(path)[: -len(".json")]
        run.pop("flaggems_report", None)
        merged[name] = run
        losses = [round(x, 3) for x in run["losses"][:: args.loss_every]]
        print(name, json.dumps({k: run.get(k) for k in SUMMARY}), "losses", losses)
    with open(args.out, "w") as f:
        json.dump(merged, f, indent=1)


if __name__ == "__main__":
    main()
