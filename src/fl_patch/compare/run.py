"""The whole-run compare: ``fl-patch [options] compare --baseline upstream|VENDOR [...] -- program args``.

The program runs twice, each time in a fresh ``python -m fl_patch`` (so ``-m torch.distributed.run ...``
works as it does there):

1. **the baseline**: ``upstream`` is megatron as released, with only the patches that let it run on this
   machine: the shipped CPU packs (vendor ``cpu``, inert where a GPU is found), no ``MG_FL_PREFER``, no
   registry module, no entry point, no FlagScale tree. ``VENDOR`` is the configuration of the second run
   with ``MG_FL_PREFER=VENDOR`` (a registration of vendor ``default`` is still chosen where VENDOR has none);
2. **the run as configured** (the environment and the fl_patch options before ``compare``), with the
   per-call compare on (``--calls N``, its JSON records in the output directory).

Both record each training step's loss and gradient norm (``steps.py``: megatron's schedules and optimizer
step, observed; else the program's log, read with megatron's training-log line, ``step N ... loss X``, or
``--step-regex``). Printed: the steps side by side with their relative differences, the first step where
the runs part beyond the tolerances, the second run's per-call table (merged over its processes); written to
``--out``: both logs, both step files, the per-call records, ``summary.json`` and, where matplotlib is
installed, ``compare.png`` (without it: no plot, said once; every number is in ``summary.json``).

Exit status 0 when both runs succeed, they never part and no patch differs; 1 otherwise; 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fl_patch.config.settings import DEFAULT_COMPARE_CALLS, ENV

__all__ = ["BASELINE_UPSTREAM_PACKS", "Steps", "first_parting", "main", "read_log_steps"]

# The packs that make released megatron run on a machine without a GPU (vendor cpu: inert where one is found).
BASELINE_UPSTREAM_PACKS = "cpu,cuda_on_cpu"
LOSS_RTOL = 1e-3
GRAD_RTOL = 1e-2
SHOWN_STEPS = 40  # a longer run prints its first, parting and last steps; summary.json has all

# megatron.training's log line, and a plain "step N[/M] ... loss X" line (examples/train_gpt.py's progress).
_MEGATRON_LINE = re.compile(r"iteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|.*?lm loss:\s*(?P<loss>[-+0-9.eEnaif]+)")
_MEGATRON_GRAD = re.compile(r"grad norm:\s*(?P<grad_norm>[-+0-9.eEnaif]+)")
_PLAIN_LINE = re.compile(r"\bstep\s+(?P<step>\d+)(?:/\d+)?\b.*?\bloss\s*[:=]?\s*(?P<loss>[-+0-9.eEnaif]+)")


class UsageError(Exception):
    pass


@dataclass
class Steps:
    """One run's steps: step -> (loss, grad norm), and where they were read from."""

    values: dict[int, tuple[float | None, float | None]] = field(default_factory=dict)
    source: str = "none"
    rank: int | None = None


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} [options] compare",
        description="Run the program twice (the baseline, then as configured with the per-call compare on) and "
        "compare their training steps.",
        epilog="The program goes after --: fl-patch compare --baseline upstream -- train.py --steps 30",
    )
    parser.add_argument("--baseline", required=True, metavar="upstream|VENDOR", help="what to compare against")
    parser.add_argument("--calls", type=_count, default=DEFAULT_COMPARE_CALLS, metavar="N", help="per-call compare N")
    parser.add_argument("--out", type=Path, default=Path("fl_patch_compare"), help="output directory")
    parser.add_argument("--loss-rtol", type=float, default=LOSS_RTOL, help="relative loss difference that parts")
    parser.add_argument("--grad-rtol", type=float, default=GRAD_RTOL, help="relative grad-norm difference that parts")
    parser.add_argument(
        "--step-regex", help="read steps from the log with this regex (named groups step, loss[, grad_norm])"
    )
    return parser


def _count(value: str) -> int:
    if not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of calls (a whole number)")
    return int(value)


def _split(words: list[str]) -> tuple[list[str], list[str]]:
    """The compare options and the program: after ``--``, or from the first word that is not an option's."""
    if "--" in words:
        cut = words.index("--")
        return words[:cut], words[cut + 1 :]
    valued = {"--baseline", "--calls", "--out", "--loss-rtol", "--grad-rtol", "--step-regex"}
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word in ("-m", "-c"):
            return words[:i], words[i:]
        i += 2 if word in valued else 1
    return words, []


def main(words: list[str], prog: str = "fl-patch") -> int:
    try:
        options, program = _split(list(words))
        parser = _parser(prog)
        parser.error = _raise  # type: ignore[method-assign,assignment]  # usage errors: one line, exit status 2
        args = parser.parse_args(options)
        if not program:
            raise UsageError("no program to run (put it after --)")
    except UsageError as exc:
        sys.stderr.write(f"usage: {prog} [options] compare --baseline upstream|VENDOR [...] -- program args\n")
        sys.stderr.write(f"{prog} compare: error: {exc}\n")
        return 2
    return Comparison(args, program).run()


def _raise(message: str) -> None:
    raise UsageError(message)


class Comparison:
    """The two runs and what is said about them."""

    def __init__(self, args: argparse.Namespace, program: list[str]) -> None:
        self.args = args
        self.program = program
        self.out: Path = args.out
        self.out.mkdir(parents=True, exist_ok=True)

    def _env(self, baseline: bool) -> dict[str, str]:
        env = dict(os.environ)
        for name in (ENV.COMPARE, ENV.COMPARE_JSON, ENV.COMPARE_STEPS):
            env.pop(name, None)
        if baseline:
            if self.args.baseline == "upstream":
                env.update({ENV.PACKS: BASELINE_UPSTREAM_PACKS, ENV.ENTRY_POINTS: "0", ENV.FLAGSCALE: "0"})
                env.pop(ENV.PREFER, None)
                env.pop(ENV.REGISTRY, None)
            else:
                env[ENV.PREFER] = self.args.baseline
            env[ENV.COMPARE_STEPS] = str((self.out / "baseline.steps.jsonl").resolve())
        else:
            env[ENV.COMPARE] = str(self.args.calls)
            if self.args.calls:  # (a compare file alone turns the compare on: --calls 0 writes none)
                env[ENV.COMPARE_JSON] = str((self.out / "calls.jsonl").resolve())
            env[ENV.COMPARE_STEPS] = str((self.out / "run.steps.jsonl").resolve())
        return env

    def _launch(self, name: str, env: dict[str, str]) -> tuple[int, float]:
        for stale in (f"{name}.log", f"{name}.steps.jsonl") + (("calls.jsonl",) if name == "run" else ()):
            (self.out / stale).unlink(missing_ok=True)
        log = self.out / f"{name}.log"
        start = time.monotonic()
        with log.open("wb") as sink:
            code = subprocess.call([sys.executable, "-m", "fl_patch", *self.program], env=env, stdout=sink, stderr=sink)
        return code, time.monotonic() - start

    def run(self) -> int:
        what = "upstream (the CPU packs only)" if self.args.baseline == "upstream" else f"vendor {self.args.baseline}"
        results: dict[str, dict[str, Any]] = {}
        read: dict[str, Steps] = {}
        for name, baseline in (("baseline", True), ("run", False)):
            label = f"baseline: {what}" if baseline else f"run: as configured, --compare {self.args.calls}"
            _say(f"{label}: {' '.join(self.program)}")
            code, seconds = self._launch(name, self._env(baseline))
            steps = self._steps(name)
            results[name] = {
                "exit": code,
                "seconds": round(seconds, 1),
                "steps": len(steps.values),
                "source": steps.source,
            }
            _say(
                f"  exit {code} after {seconds:.1f} s, {len(steps.values)} step(s) read ({steps.source}); log "
                f"{self.out / (name + '.log')}"
            )
            if code != 0:
                tail = (self.out / f"{name}.log").read_text(errors="replace").splitlines()[-12:]
                _say("\n".join("  | " + line for line in tail))
            read[name] = steps
        return self._report(results, read["baseline"], read["run"])

    def _steps(self, name: str) -> Steps:
        observed = read_step_records(self.out / f"{name}.steps.jsonl")
        if observed.values:
            return observed
        return read_log_steps((self.out / f"{name}.log").read_text(errors="replace"), self.args.step_regex)

    def _report(self, results: dict[str, dict[str, Any]], base: Steps, run: Steps) -> int:
        rows = side_by_side(base, run)
        parting = first_parting(rows, self.args.loss_rtol, self.args.grad_rtol)
        print(format_steps(rows, parting, self.args.loss_rtol, self.args.grad_rtol))
        calls = self._calls_table()
        plot = plot_steps(rows, parting, self.out / "compare.png", self.args.baseline)
        summary = {
            "program": self.program,
            "baseline": {"what": self.args.baseline, **results["baseline"], "rank": base.rank},
            "run": {"compare_calls": self.args.calls, **results["run"], "rank": run.rank},
            "loss_rtol": self.args.loss_rtol,
            "grad_rtol": self.args.grad_rtol,
            "first_parting_step": parting,
            "steps": rows,
            "calls": calls,
            "plot": str(plot) if plot else None,
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(f"written: {self.out / 'summary.json'}" + (f", {plot}" if plot else ""))
        differs = [c for c in calls if c.get("verdict") == "differs"]
        failed = results["baseline"]["exit"] != 0 or results["run"]["exit"] != 0
        return 1 if failed or parting is not None or differs or not rows else 0

    def _calls_table(self) -> list[dict[str, object]]:
        from fl_patch.compare.results import merge
        from fl_patch.compare.table import format_table

        path = self.out / "calls.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        records = merge([{**r, "rank": line.get("rank")} for line in lines for r in line.get("records", [])])
        if not lines:
            said = "off (--calls 0)" if not self.args.calls else "no process of the second run wrote records"
            print(f"per-call compare: {said}")
            return records
        label = f"the run as configured, {len(lines)} process(es), merged by target"
        print(format_table(records, self.args.calls, label=label))
        return records


def _say(text: str) -> None:
    sys.stderr.write(f"fl-patch compare: {text}\n")
    sys.stderr.flush()


def read_step_records(path: Path) -> Steps:
    """The observer's records: the lowest rank that reported losses (the last pipeline stage's first)."""
    if not path.exists():
        return Steps()
    by_rank: dict[int, dict[int, tuple[float | None, float | None]]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        by_rank.setdefault(int(record.get("rank") or 0), {})[int(record["step"])] = (
            record.get("loss"),
            record.get("grad_norm"),
        )
    for rank in sorted(by_rank):
        if any(loss is not None for loss, _ in by_rank[rank].values()):
            return Steps(by_rank[rank], "observed: megatron's schedule and optimizer step", rank)
    return Steps()


def _float(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


def read_log_steps(text: str, pattern: str | None = None) -> Steps:
    """Steps read from a program's output: ``pattern``, megatron's training-log line, or ``step N ... loss X``."""
    patterns = [(re.compile(pattern), "log: --step-regex")] if pattern else []
    patterns += [(_MEGATRON_LINE, "log: megatron's training log"), (_PLAIN_LINE, "log: 'step N ... loss X' lines")]
    for regex, source in patterns:
        values: dict[int, tuple[float | None, float | None]] = {}
        for line in text.replace("\r", "\n").splitlines():
            match = regex.search(line)
            if match is None:
                continue
            groups = match.groupdict()
            grad = groups.get("grad_norm")
            if grad is None and regex is _MEGATRON_LINE:
                found = _MEGATRON_GRAD.search(line)
                grad = found["grad_norm"] if found else None
            values[int(groups["step"])] = (_float(groups.get("loss")), _float(grad))
        if values:
            return Steps(values, source)
    return Steps()


def _rel(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


def side_by_side(base: Steps, run: Steps) -> list[dict[str, Any]]:
    rows = []
    for step in sorted(set(base.values) | set(run.values)):
        (loss_a, grad_a), (loss_b, grad_b) = base.values.get(step, (None, None)), run.values.get(step, (None, None))
        rows.append(
            {
                "step": step,
                "loss_baseline": loss_a,
                "loss_run": loss_b,
                "loss_rel": _rel(loss_a, loss_b),
                "grad_norm_baseline": grad_a,
                "grad_norm_run": grad_b,
                "grad_norm_rel": _rel(grad_a, grad_b),
            }
        )
    return rows


def first_parting(rows: list[dict[str, Any]], loss_rtol: float, grad_rtol: float) -> int | None:
    """The first step whose loss (or grad norm) differs by more than its relative tolerance, or one run lacks."""
    for row in rows:
        if row["loss_baseline"] is None or row["loss_run"] is None:
            if row["loss_baseline"] is not None or row["loss_run"] is not None:
                return int(row["step"])  # one run has the step, the other not (it stopped, or skipped)
            continue
        if (row["loss_rel"] or 0.0) > loss_rtol or (row["grad_norm_rel"] or 0.0) > grad_rtol:
            return int(row["step"])
    return None


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_steps(rows: list[dict[str, Any]], parting: int | None, loss_rtol: float, grad_rtol: float) -> str:
    if not rows:
        return "steps: none read from either run (see the logs)"
    shown = rows
    if len(rows) > SHOWN_STEPS:
        keep = {r["step"] for r in rows[:10] + rows[-5:]}
        if parting is not None:
            keep |= {r["step"] for r in rows if abs(int(r["step"]) - parting) <= 2}
        shown = [r for r in rows if r["step"] in keep]
    lines = [
        f"{'step':>6}  {'loss base':>11}  {'loss run':>11}  {'rel diff':>9}  {'grad base':>10}  {'grad run':>10}  "
        f"{'rel diff':>9}"
    ]
    previous = None
    for row in shown:
        if previous is not None and int(row["step"]) != previous + 1:
            lines.append(f"{'...':>6}")
        previous = int(row["step"])
        mark = "  <- the runs part here" if row["step"] == parting else ""
        lines.append(
            f"{row['step']:>6}  {_cell(row['loss_baseline'], '.6f'):>11}  {_cell(row['loss_run'], '.6f'):>11}  "
            f"{_cell(row['loss_rel'], '.2e'):>9}  {_cell(row['grad_norm_baseline'], '.4f'):>10}  "
            f"{_cell(row['grad_norm_run'], '.4f'):>10}  {_cell(row['grad_norm_rel'], '.2e'):>9}{mark}"
        )
    tolerance = f"loss {loss_rtol:g}, grad norm {grad_rtol:g} relative"
    if parting is None:
        lines.append(f"the runs agree at every one of {len(rows)} step(s) (tolerance: {tolerance})")
    else:
        lines.append(f"the runs part at step {parting} (tolerance: {tolerance})")
    return "\n".join(lines)


def plot_steps(rows: list[dict[str, Any]], parting: int | None, path: Path, baseline: str) -> Path | None:
    """Loss and grad norm per step, both runs, the parting step marked: a PNG, if matplotlib is installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no plot: matplotlib is not installed here (pip install matplotlib); the numbers are in {path.parent}")
        return None
    if not rows:
        return None
    figure, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    steps = [r["step"] for r in rows]
    for axis, key, title in ((axes[0], "loss", "loss"), (axes[1], "grad_norm", "grad norm")):
        axis.plot(steps, [r[f"{key}_baseline"] for r in rows], label=f"baseline ({baseline})")
        axis.plot(steps, [r[f"{key}_run"] for r in rows], label="run", linestyle="--")
        if parting is not None:
            axis.axvline(parting, color="red", linewidth=0.8, label=f"parts at step {parting}")
        axis.set_ylabel(title)
        axis.legend()
    axes[1].set_xlabel("step")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
