"""Loss curves of fp8 against bf16 and fp32 (issue 48): the gaps, and a plot per model.

``python bench/plot_fp8_curves.py curves.json docs/`` reads the merged runs of ``bench/gpu_fp8.sh``'s ``curves131`` /
``curves281`` stages (``<model>_curve_bf16``, ``_fp8``, ``_fp32``: the same model, seed and fresh Markov batches), prints
per model the relative gap of each pair over 10-step windows (mean and largest) and over the last 50 steps (over the
steps both runs have: the fp32 run is shorter), and writes ``fp8_loss_<model>.png`` (needs matplotlib).

The yardstick: DeepSeek-V3's technical report (arXiv:2412.19437, section 3.3) trains in fp8 with "relative loss error
... consistently below 0.25%" against its bf16 baseline; the bf16-against-fp32 gap of the same run is printed beside it
(how far bf16 itself is from fp32 over this many steps).
"""

from __future__ import annotations

import json
import sys

WINDOW = 10
MODELS = {"l131": "1.31B", "b3": "2.81B"}


def windows(values: list[float], n: int) -> list[float]:
    return [sum(values[i : i + WINDOW]) / len(values[i : i + WINDOW]) for i in range(0, n, WINDOW)]


def gap(run: list[float], ref: list[float]) -> dict[str, float]:
    """Relative gap of ``run`` to ``ref`` over the steps both have: 10-step windows (mean, largest), last 50 steps."""
    n = min(len(run), len(ref))
    a, b = windows(run, n), windows(ref, n)
    rel = [abs(x - y) / y for x, y in zip(a, b, strict=True)]
    tail = min(50, n)
    last = abs(sum(run[n - tail : n]) - sum(ref[n - tail : n])) / sum(ref[n - tail : n])
    return {"steps": n, "window_mean": sum(rel) / len(rel), "window_max": max(rel), "last50": last}


def main() -> int:
    runs = json.load(open(sys.argv[1]))
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "."
    report: dict[str, dict] = {}
    for key, label in MODELS.items():
        got = {kind: runs.get(f"{key}_curve_{kind}") for kind in ("bf16", "fp8", "fp32")}
        if got["bf16"] is None or got["fp8"] is None:
            continue
        losses = {kind: run["losses"] for kind, run in got.items() if run is not None}
        entry: dict[str, object] = {"fp8_vs_bf16": gap(losses["fp8"], losses["bf16"])}
        if "fp32" in losses:
            entry["bf16_vs_fp32"] = gap(losses["bf16"], losses["fp32"])
            entry["fp8_vs_fp32"] = gap(losses["fp8"], losses["fp32"])
        entry["first_last"] = {kind: [round(v[0], 4), round(v[-1], 4), len(v)] for kind, v in losses.items()}
        entry["device"] = got["bf16"].get("device_name")
        report[label] = entry
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            continue
        plt.figure(figsize=(8, 4.5))
        for kind, style in (("fp32", "k-"), ("bf16", "b-"), ("fp8", "r-")):
            if kind in losses:
                plt.plot(range(1, len(losses[kind]) + 1), losses[kind], style, lw=1, label=kind)
        plt.xlabel("step")
        plt.ylabel("loss")
        plt.title(
            f"{label} Llama-style, fresh Markov data: fp8 (tensorwise, hybrid) vs bf16 vs fp32 ({entry['device']})"
        )
        plt.legend()
        plt.tight_layout()
        plt.savefig(f"{out_dir}/fp8_loss_{label}.png", dpi=110)
        plt.close()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
