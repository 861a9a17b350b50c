"""fp8 against bf16 over several weight seeds, against how far bf16 runs of different seeds part (issue 48).

``python bench/fp8_seed_gaps.py RUN.json ... [--plot docs/fp8_loss_seeds.png] [--out gaps.json]`` reads gems_gpt runs of
the 1.31B's 300-step curve (``bench/gpu_fp8.sh`` stages ``curves131`` and ``seeds``; a file holds one run, or several
merged by name), groups them by weight seed (a run that records none is the 1234 every run used before ``--seed``
existed), and prints:

- per seed, each fp8 run (format and recipe; the seed sweep runs hybrid tensorwise) against bf16: the relative gap over the last 50 steps and over 10-step windows (mean), and
  the first step each run's loss is below 10.0 (where it leaves the plateau near 10.3);
- the same two gaps between bf16 runs of different seeds (how far two runs that differ only in their initial
  weights part on this data), and between two runs of the same seed and settings where given (the last one given is
  the one compared above): the yardsticks the fp8 gap is read against beside DeepSeek-V3's 0.25%
  (arXiv:2412.19437, section 3.3), which compares runs far past any plateau.

With ``--data zipf`` it reads the runs of the ``zipf131`` / ``zipf281`` stages instead (Zipf-distributed tokens, warm-up
and cosine decay: no plateau, so "leaves" is step 1 for every run), and the summary adds the gap between the seeds'
mean curves and each seed's signed gap (fp8 above bf16 is positive).

Only the loss is read; the runs may come from different cards (each run's device is printed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics

from plot_fp8_curves import gap  # (bench/ is the script's directory: first on sys.path)

PLATEAU = 10.0


def _runs(paths: list[str]) -> list[dict]:
    out = []
    for path in paths:
        data = json.load(open(path))
        out.extend([data] if "losses" in data else list(data.values()))
    return out


def _kind(run: dict) -> str:
    """``bf16``, ``fp32`` or ``<format>:<recipe>`` (``hybrid:tensorwise``: a run that names no format was hybrid)."""
    if run.get("fp32"):
        return "fp32"
    recipe = run.get("fp8_recipe")
    return f"{run.get('fp8') or 'hybrid'}:{recipe}" if recipe else "bf16"


def _mean_curve(curves: list[list[float]]) -> list[float]:
    n = min(len(c) for c in curves)
    return [sum(c[i] for c in curves) / len(curves) for i in range(n)]


def _signed_last50(run: list[float], ref: list[float]) -> float:
    """``gap``'s last-50 figure with its sign: positive where ``run`` ends above ``ref``."""
    return gap(run, ref)["last50"] * (1 if sum(run[-50:]) >= sum(ref[-50:]) else -1)


def _leaves(losses: list[float]) -> int | None:
    return next((i + 1 for i, v in enumerate(losses) if v < PLATEAU), None)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--plot")
    parser.add_argument("--out")
    parser.add_argument("--hidden", type=int, default=2048, help="the model read (runs of other sizes are skipped)")
    parser.add_argument(
        "--data",
        choices=("markov", "zipf"),
        default="markov",
        help="the runs read: fresh data from gems_gpt.py's uniform Markov chain (a run that records none) or its Zipf one",
    )
    args = parser.parse_args()
    by_seed: dict[int, dict[str, dict]] = {}  # the last run given of each seed and kind
    every: dict[tuple[int, str], list[dict]] = {}
    for run in _runs(args.runs):
        if len(run.get("losses", [])) < 100 or _kind(run) == "fp32" or run.get("hidden") != args.hidden:
            continue
        if run.get("data", "markov") != args.data:
            continue
        seed = int(run.get("seed") or 1234)
        by_seed.setdefault(seed, {})[_kind(run)] = run
        every.setdefault((seed, _kind(run)), []).append(run)
    seeds = sorted(s for s, kinds in by_seed.items() if "bf16" in kinds and len(kinds) > 1)
    rows: list[dict] = []
    print(
        f"{'seed':>6} {'fp8 run':>18} {'vs bf16 last50':>15} {'windows':>8} {'bf16 leaves':>12} {'fp8 leaves':>11}  device"
    )
    for seed in seeds:
        bf16 = by_seed[seed]["bf16"]["losses"]
        for kind, run in sorted(by_seed[seed].items()):
            if kind == "bf16":
                continue
            row = {"seed": seed, "kind": kind, **gap(run["losses"], bf16)}
            row.update(bf16_leaves=_leaves(bf16), fp8_leaves=_leaves(run["losses"]), device=run.get("device_name"))
            rows.append(row)
            print(
                f"{seed:>6} {kind:>18} {row['last50']:>15.2%} {row['window_mean']:>8.2%} {row['bf16_leaves']!s:>12} "
                f"{row['fp8_leaves']!s:>11}  {row['device']}"
            )
    pairs = {
        f"{a}-{b}": gap(by_seed[a]["bf16"]["losses"], by_seed[b]["bf16"]["losses"])
        for a, b in itertools.combinations(seeds, 2)
    }
    for name, pair in pairs.items():
        print(f"bf16 seeds {name}: last50 {pair['last50']:.2%}, windows {pair['window_mean']:.2%}")
    reruns = {}  # the same seed and settings run twice: how far a run parts from itself (atomics, GEMM order)
    for (seed, kind), runs in every.items():
        for i, (a, b) in enumerate(itertools.combinations(runs, 2)):
            reruns[f"{seed} {kind} #{i}"] = {
                **gap(b["losses"], a["losses"]),
                "leaves": [_leaves(a["losses"]), _leaves(b["losses"])],
            }
    for name, pair in reruns.items():
        print(
            f"rerun of seed {name}: last50 {pair['last50']:.2%}, windows {pair['window_mean']:.2%}, leaves {pair['leaves']}"
        )
    report: dict[str, object] = {"rows": rows, "bf16_between_seeds": pairs, "reruns": reruns}
    sweep = [r for r in rows if r["kind"] == "hybrid:tensorwise"]
    if sweep:
        summary: dict[str, object] = {
            "seeds": [r["seed"] for r in sweep],
            "fp8_vs_bf16_last50_median": statistics.median(r["last50"] for r in sweep),
            "fp8_leaves_later_by_steps": [
                r["fp8_leaves"] - r["bf16_leaves"] for r in sweep if r["fp8_leaves"] and r["bf16_leaves"]
            ],
        }
        if pairs:
            summary["bf16_vs_bf16_last50_median"] = statistics.median(p["last50"] for p in pairs.values())
        # the seeds' curves averaged step by step, fp8's against bf16's: what is left of the gap once the
        # seeds' own scatter is averaged out (the same seeds on both sides)
        fp8_mean = _mean_curve([by_seed[r["seed"]][r["kind"]]["losses"] for r in sweep])
        bf16_mean = _mean_curve([by_seed[r["seed"]]["bf16"]["losses"] for r in sweep])
        summary["seed_mean_curves"] = gap(fp8_mean, bf16_mean)
        summary["fp8_minus_bf16_last50_signed"] = [
            _signed_last50(by_seed[r["seed"]][r["kind"]]["losses"], by_seed[r["seed"]]["bf16"]["losses"]) for r in sweep
        ]
        report["summary"] = summary
        print(json.dumps(summary))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    if args.plot and seeds:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plt.figure(figsize=(9, 5))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        styles = ["--", ":", "-.", (0, (5, 1))]
        for i, seed in enumerate(seeds):
            c = colors[i % len(colors)]
            plt.plot(by_seed[seed]["bf16"]["losses"], color=c, lw=1, label=f"seed {seed} bf16")
            others = sorted(k for k in by_seed[seed] if k != "bf16")
            for j, kind in enumerate(others):
                losses = by_seed[seed][kind]["losses"]
                plt.plot(losses, color=c, lw=1, ls=styles[j % len(styles)], label=f"seed {seed} {kind}")
        plt.xlabel("step")
        plt.ylabel("loss")
        size = {2048: "1.31B", 3072: "2.81B"}.get(args.hidden, f"hidden {args.hidden}")
        data = "Zipf-distributed Markov data, warm-up + cosine" if args.data == "zipf" else "fresh Markov data"
        plt.title(f"{size}, {data}: bf16 (solid) and fp8 (dashed, dotted) per weight seed", fontsize=10)
        plt.legend(fontsize=7, ncol=2)
        plt.tight_layout()
        plt.savefig(args.plot, dpi=110)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
