"""What fl_patch costs: start-up, memory, import, training step and per call.

Every figure is a comparison measured side by side in the same run, variants
interleaved (these machines are noisy), medians over repetitions:

* start-up: ``python -c pass`` plain, with the bootstrap ``sitecustomize`` on
  PYTHONPATH (fl_patch armed), with ``FL_PATCH=0``, and through ``python -m fl_patch``;
* memory: resident set at the end of ``python -c pass`` with and without the bootstrap,
  and after importing megatron-core's training modules with fl_patch (every shipped
  pack) against by hand;
* import: CPU time of importing megatron-core's training modules (``megatron.core``,
  GPT model, DDP, optimizer, schedules) with fl_patch active and every shipped pack
  registered (and every pack but the CUDA-on-CPU transfer, which only a machine without a
  GPU loads), against without, and without against without (the noise floor). Upstream megatron-core cannot even be imported on this CPU-only
  machine without one change (``...moe.ops.paged_stash`` imports triton), so
  "without" makes that one change by hand (the stand-in module put in
  ``sys.modules``), which is what a hand-monkeypatching user does;
* training step: the main job (``examples/train_gpt.py``'s model, data and optimizer,
  CPU pack) with fl_patch also patching four hot methods (TransformerLayer.forward,
  Attention.forward, DotProductAttention.forward, MLP.forward) to identical copies of
  themselves, against upstream's, in one process (blocks of steps alternated), with an
  upstream-against-upstream control for the noise floor;
* per call: ``bench/percall.py`` (patched function, method, staticmethod,
  classmethod, class vs direct call, @overridable dispatch, wrapt, closure).

Run:  .venv/bin/python bench/overhead.py [--only startup,memory,import,train,percall] [--quick] [--json out.json]
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "sitecustomize_template"
SUPPORT = REPO / "bench" / "support"

RSS = "int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1])"

TRAINING_IMPORTS = """
import megatron.core
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.distributed import DistributedDataParallel
from megatron.core.optimizer import get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.datasets.gpt_dataset import MockGPTDataset
from megatron.core import dist_checkpointing
"""

# "Without fl_patch": the one hand change that lets upstream megatron.core import here
# (what a hand-monkeypatching user writes: a module with the three names it exports).
HAND_STAND_IN = """
import sys, types
_stand_in = types.ModuleType("megatron.core.transformer.moe.ops.paged_stash")
_stand_in.GLOBAL_BLOCK_SIZE = 1024
_stand_in.paged_stash_copy_kernel = _stand_in.paged_stash_pop_kernel = None
sys.modules[_stand_in.__name__] = _stand_in
"""


def _env(**extra: str) -> dict[str, str]:
    # PYTHONDONTWRITEBYTECODE (set on some machines, this one too) would recompile every
    # edited module from source in every process: measure what an installed package costs.
    dropped = ("MG_FL_PREFER", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k in dropped)}
    env["PYTHONPATH"] = str(REPO / "src")
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra)
    return env


def _with_template(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PYTHONPATH": os.pathsep.join([str(TEMPLATE), env["PYTHONPATH"]])}


def _python(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{proc.stderr[-3000:]}")
    return proc


def _timed(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    _python(args, env)
    return time.perf_counter() - start


def startup(reps: int) -> list[dict[str, object]]:
    variants = {
        "plain": (["-c", "pass"], _env()),
        "bootstrap sitecustomize (fl_patch armed)": (["-c", "pass"], _with_template(_env())),
        "bootstrap sitecustomize, FL_PATCH=0": (["-c", "pass"], _with_template(_env(FL_PATCH="0"))),
        "python -m fl_patch -c pass (exec launcher)": (["-m", "fl_patch", "-c", "pass"], _env()),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(reps):
        for name, (args, env) in variants.items():
            samples[name].append(_timed(args, env))
    base = statistics.median(samples["plain"])
    return [
        {"variant": name, "median_ms": statistics.median(v) * 1e3, "extra_ms": (statistics.median(v) - base) * 1e3}
        for name, v in samples.items()
    ]


def _rss_kb(code: str, env: dict[str, str]) -> int:
    return int(_python(["-c", f"{code}\nprint({RSS})"], env).stdout.split()[-1])


def memory(reps: int) -> list[dict[str, object]]:
    cases = {
        "python -c pass": ("", _env(), _with_template(_env())),
        "import megatron-core training modules": (
            TRAINING_IMPORTS,
            _env(),  # the hand stand-in is prepended below
            _with_template(_env()),
        ),
    }
    rows = []
    for name, (code, plain_env, fl_env) in cases.items():
        without, with_fl = [], []
        for _ in range(reps):
            without.append(_rss_kb((HAND_STAND_IN if code else "") + code, plain_env))
            with_fl.append(_rss_kb(code, fl_env))
        rows.append(
            {
                "case": name,
                "without_mb": statistics.median(without) / 1024,
                "with_fl_patch_mb": statistics.median(with_fl) / 1024,
                "growth_mb": (statistics.median(with_fl) - statistics.median(without)) / 1024,
            }
        )
    return rows


def imports(reps: int) -> dict[str, object]:
    """CPU time of the imports, with fl_patch against by hand, and by hand against by hand.

    CPU time (``time.process_time``), not wall time: on this 2-core machine the wall
    time of a 3-second import swings by +-100 ms with whatever else runs. The
    hand-against-hand control shows what is left of the noise.
    """
    timer = "import time\n_t = time.process_time()\n{body}\nprint(time.process_time() - _t)"
    without_code = timer.format(body=HAND_STAND_IN + TRAINING_IMPORTS)
    with_code = timer.format(body=TRAINING_IMPORTS)
    samples: dict[str, list[float]] = {"without": [], "control": [], "with": [], "no_transfer": []}
    no_transfer = _with_template(_env(FL_PATCH_CUDA_ON_CPU="0"))
    for _ in range(reps):
        samples["without"].append(float(_python(["-c", without_code], _env()).stdout.split()[-1]))
        samples["with"].append(float(_python(["-c", with_code], _with_template(_env())).stdout.split()[-1]))
        samples["no_transfer"].append(float(_python(["-c", with_code], no_transfer).stdout.split()[-1]))
        samples["control"].append(float(_python(["-c", without_code], _env()).stdout.split()[-1]))
    a, b, t, c = (statistics.median(samples[k]) for k in ("without", "with", "no_transfer", "control"))
    return {
        "without_s": a,
        "with_fl_patch_s": b,
        "extra_ms": (b - a) * 1e3,
        "ratio": b / a,
        "no_transfer_s": t,  # every pack but the CUDA-on-CPU transfer (what a GPU machine loads)
        "no_transfer_extra_ms": (t - a) * 1e3,
        "no_transfer_ratio": t / a,
        "control_extra_ms": (c - a) * 1e3,
        "samples": samples,
    }


def train_step(reps: int, blocks: int) -> dict[str, object]:
    """Step time with four hot methods patched to identical copies vs upstream, in one process.

    Whole runs in separate processes differ by +-10% here, which would hide a 1% cost;
    so ``bench/support/train_step_ab.py`` builds the main job once and alternates blocks
    of steps patched / unpatched. The same script with ``--control`` alternates upstream
    with upstream: the noise floor of this measurement.
    """
    env = _env(
        FL_PATCH_REGISTRY="identical_copies_registry", PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(SUPPORT)])
    )
    command = ["-m", "fl_patch", "bench/support/train_step_ab.py", "--blocks", str(blocks)]
    with tempfile.TemporaryDirectory() as tmp:
        # One untimed run in report mode proves the copies are applied and called (report
        # mode counts calls through wrappers, so it is kept out of the timed runs).
        report = Path(tmp) / "report.jsonl"
        _python(["-m", "fl_patch", "examples/train_gpt.py", "--quiet", "--steps", "3"],
                {**env, "FL_PATCH_REPORT_FILE": str(report)})  # fmt: skip
        records = [r for line in report.read_text().splitlines() for r in json.loads(line)["records"]]
        calls = {r["target"]: r["calls"] for r in records if r["source"] == "identical_copies_registry"}

    def ratio(*extra: str) -> float:
        line = [x for x in _python([*command, *extra], env).stdout.splitlines() if x.startswith("RESULT")][-1]
        return json.loads(line[len("RESULT") :])["patched_over_unpatched_step_time"]

    patched, control = [], []
    for _ in range(reps):  # interleave the two kinds of process too
        patched.append(ratio())
        control.append(ratio("--control"))
    return {
        "patched_over_unpatched": statistics.median(patched),
        "control_a_over_a": statistics.median(control),
        "runs": {"patched": patched, "control": control},
        "copies_calls_in_3_steps": calls,
    }


def percall(quick: bool) -> tuple[list[dict[str, object]], str]:
    """bench/percall.py's rows and the table it prints."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "percall.json"
        args = ["bench/percall.py", "--json", str(out)] + (["--repeat", "9", "--number", "5000"] if quick else [])
        table = _python(args, _env()).stdout.strip()
        return json.loads(out.read_text()), table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="startup,memory,import,train,percall")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, not figures)")
    parser.add_argument("--json")
    args = parser.parse_args()
    only = set(args.only.split(","))
    q = args.quick
    # Byte-compile fl_patch first, as an install does (see _env).
    _python(["-m", "compileall", "-q", str(REPO / "src" / "fl_patch"), str(SUPPORT)], _env())
    results: dict[str, object] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}

    if "startup" in only:
        results["startup"] = rows = startup(5 if q else 41)
        print("\n### Start-up: `python -c pass` (median of interleaved runs)\n")
        print("| variant | median | extra |\n|---|---|---|")
        for r in rows:
            print(f"| {r['variant']} | {r['median_ms']:.1f} ms | {r['extra_ms']:+.1f} ms |")
    if "memory" in only:
        results["memory"] = rows = memory(1 if q else 5)
        print("\n### Memory: resident set at the end of the process (median)\n")
        print("| case | without fl_patch | with fl_patch | growth |\n|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['case']} | {r['without_mb']:.1f} MB | {r['with_fl_patch_mb']:.1f} MB | {r['growth_mb']:+.2f} MB |"
            )
    if "import" in only:
        results["import"] = r = imports(3 if q else 15)
        print("\n### Import: megatron-core's training modules, CPU time (median of interleaved runs)\n")
        print("| without fl_patch (by hand) | with fl_patch | extra | ratio |")
        print("|---|---|---|---|")
        base = f"{r['without_s'] * 1e3:.0f} ms"
        print(
            f"| {base} | every shipped pack: {r['with_fl_patch_s'] * 1e3:.0f} ms | {r['extra_ms']:+.1f} ms"
            f" | {r['ratio']:.3f} |"
        )
        print(
            f"| {base} | every pack but the CUDA-on-CPU transfer: {r['no_transfer_s'] * 1e3:.0f} ms"
            f" | {r['no_transfer_extra_ms']:+.1f} ms | {r['no_transfer_ratio']:.3f} |"
        )
        print(f"| {base} | control, by hand again | {r['control_extra_ms']:+.1f} ms | |")
    if "train" in only:
        results["train"] = r = train_step(3 if q else 5, 8 if q else 40)
        print("\n### Training step: the main job, 4 hot methods patched to identical copies, in one process\n")
        print("| step time, patched / unpatched (median of runs) | control: upstream / upstream (noise floor) |")
        print("|---|---|")
        print(f"| {r['patched_over_unpatched']:.4f} | {r['control_a_over_a']:.4f} |")
        print(f"\nruns: {r['runs']}; calls through the copies in 3 steps: {r['copies_calls_in_3_steps']}")
    if "percall" in only:
        results["percall"], table = percall(q)
        print("\n### Per call: time of a call through the upstream name, as a ratio to calling the impl directly\n")
        print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
