"""Plots and distances of the numerics runs of ``bench/gpu_determinism.sh`` (issue 28).

``python bench/plot_numerics.py det_numerics.json docs/``: for the fp32 reference
(``num_fp32``), upstream bf16 (``num_up_bf16``) and the pack bf16 (``num_pack_bf16``),
prints each bf16 run's distance to the reference (mean |loss difference| over all steps
and over the last 100, mean relative grad-norm difference) and writes
``numerics_loss.png`` and ``numerics_grad_norm.png`` (needs matplotlib).
"""

from __future__ import annotations

import json
import sys


def distances(ref: list[float], run: list[float]) -> dict[str, float]:
    diffs = [abs(a - b) for a, b in zip(ref, run, strict=True)]
    tail = diffs[-100:]
    return {"mean_abs": sum(diffs) / len(diffs), "mean_abs_last100": sum(tail) / len(tail), "max_abs": max(diffs)}


def main() -> int:
    runs = json.load(open(sys.argv[1]))
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "."
    ref = runs["num_fp32"]
    report = {}
    for name in ("num_up_bf16", "num_pack_bf16"):
        run = runs[name]
        rel = [abs(a - b) / max(abs(a), 1e-12) for a, b in zip(ref["grad_norms"], run["grad_norms"], strict=True)]
        report[name] = {"loss": distances(ref["losses"], run["losses"]), "grad_norm_rel_mean": sum(rel) / len(rel)}
    print(json.dumps(report, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for key, ylabel in (("losses", "loss"), ("grad_norms", "grad norm")):
        plt.figure(figsize=(8, 4.5))
        for name, label in (
            ("num_fp32", "fp32 reference"),
            ("num_up_bf16", "upstream bf16"),
            ("num_pack_bf16", "pack bf16"),
        ):
            plt.plot(runs[name][key], label=label, linewidth=0.8)
        plt.xlabel("step")
        plt.ylabel(ylabel)
        plt.legend()
        plt.tight_layout()
        plt.savefig(f"{out_dir}/numerics_{'loss' if key == 'losses' else 'grad_norm'}.png", dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
