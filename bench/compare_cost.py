"""What compare mode costs: a call past its first N, and the demo's steps once every budget is spent.

Two measurements, variants interleaved (these machines are noisy), medians:

* per call: a patched function's wrapper once its N calls are spent, against calling the impl itself (what is
  installed when compare mode is off): a Python function that returns its argument, and one that does a
  64x64 float32 multiply;
* the demo (``examples/train_gpt.py`` with ``examples/my_plugin``, CPU pack): seconds per step for the steps
  after ``--skip`` (by then every target's N calls are spent), with ``--compare N`` against without, and the
  whole run's wall time (the first steps pay for the compares).

Run:  .venv/bin/python bench/compare_cost.py [--calls 3] [--rounds 3] [--steps 6] [--skip 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def per_call(rounds: int) -> dict[str, float]:
    import torch

    from fl_patch.compare import wrapper
    from fl_patch.compare.results import RESULTS

    wrapper.configure(1)
    x = torch.ones(64, 64)

    def identity(value: object) -> object:
        return value

    def multiply(value: torch.Tensor) -> torch.Tensor:
        return value * 2.0

    out: dict[str, float] = {}
    for name, impl, argument in (("identity", identity, 1), ("multiply 64x64", multiply, x)):
        wrapped = wrapper.wrap_for_compare(f"bench.{name}", impl, impl, "function")
        wrapped(argument)  # the one compared call: its budget is spent from here on
        assert RESULTS.by_target[f"bench.{name}"].seen == 1
        number = 200_000 if name == "identity" else 20_000
        direct, past = [], []
        for _ in range(rounds):
            direct.append(_ns(impl, argument, number))
            past.append(_ns(wrapped, argument, number))
        out[f"{name}: impl (ns)"] = statistics.median(direct)
        out[f"{name}: wrapper past its N calls (ns)"] = statistics.median(past)
    return out


def _ns(function: object, argument: object, number: int) -> float:
    """Nanoseconds per call of ``function(argument)``, the best of three."""
    return min(timeit.repeat(lambda: function(argument), number=number, repeat=3)) / number * 1e9  # type: ignore[operator]


def demo(calls: int, rounds: int, steps: int, skip: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_PATCH")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO / "examples" / "my_plugin")])
    times: dict[str, list[float]] = {"off": [], "on": []}
    walls: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for variant in ("off", "on"):
                log = Path(tmp) / f"{variant}.jsonl"
                command = [sys.executable, "-m", "fl_patch", "--registry", "my_plugin.registry"]
                command += ["--compare", str(calls)] if variant == "on" else []
                command += [str(REPO / "examples" / "train_gpt.py"), "--steps", str(steps), "--quiet"]
                command += ["--log-file", str(log)]
                start = time.perf_counter()
                subprocess.run(command, env=env, check=True, capture_output=True)
                walls[variant].append(time.perf_counter() - start)
                records = [json.loads(line) for line in log.read_text().splitlines()]
                tokens = [r["tokens_per_s"] for r in records if r["step"] > skip]
                per_step = 4 * 2 * 64  # micro-batch 4, 2 micro-batches, 64 tokens: the demo's defaults
                times[variant].append(statistics.median(per_step / t for t in tokens))
    return {
        f"seconds per step after step {skip}, compare off": statistics.median(times["off"]),
        f"seconds per step after step {skip}, --compare {calls}": statistics.median(times["on"]),
        f"wall seconds, {steps} steps, compare off": statistics.median(walls["off"]),
        f"wall seconds, {steps} steps, --compare {calls}": statistics.median(walls["on"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--skip", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = {**per_call(args.rounds), **demo(args.calls, args.rounds, args.steps, args.skip)}
    for key, value in results.items():
        print(f"{key:<55} {value:12.4f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
