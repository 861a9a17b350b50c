"""Start-up cost of a whole process: importing megatron's GPT model and optimizer, with and without fl_patch.

The figure a user feels (issue 43, item 7): a fresh interpreter that imports
``megatron.core.models.gpt.gpt_model`` and ``megatron.core.optimizer``, measured as a whole
process (interpreter start, fl_patch's activation, its packs, megatron's import):

* ``plain``: python with a hand stub (upstream megatron-core cannot import on a CPU-only torch:
  ``moe.ops.paged_stash`` imports triton; the stub puts that one module in ``sys.modules``, as a
  hand-monkeypatching user does);
* ``fl_patch, no packs``: the bootstrap on ``PYTHONPATH`` (how a job activates fl_patch),
  ``FL_PATCH_PACKS=none`` (the GPU-only stand-in lets megatron import);
* ``fl_patch, default packs``: the same with every shipped pack (a CPU machine: the CPU pack and the
  CUDA-on-CPU transfer);
* ``fl_patch, N registrations``: ``--registrations N`` adds a registry of N identical copies of
  megatron functions (the oracle's catalogue, when ``tests/support/oracle`` is there).

Variants are interleaved and repeated; the figure is the median of each, as CPU time of the child
(user + system, from ``wait4``: steady on a loaded machine) and wall time (what a quiet machine
shows). The armed cost of an ``import`` statement (``builtins.__import__`` while fl_patch waits for
megatron) is measured too.

    python bench/startup.py [--reps 15] [--json docs/bench_startup.json]

``--training``: instead, a whole one-rank megatron.training run to its end (``examples/pretrain_gpt_cpu.py``,
a small GPT, 2 iterations, megatron.training's defaults: its bias fusions on), under ``python -m fl_patch``:
with the CPU pack as shipped (megatron's ``@jit_fuser`` functions run as written), and with that patch
disabled (``FL_PATCH_DISABLE=megatron.core.jit.jit_fuser``: torch.compile, at the first call) with
inductor's cache warm and empty (a fresh ``TORCHINDUCTOR_CACHE_DIR`` each run, as on a new machine). Then the
steps themselves: ``--iterations N`` runs (default 40; 0: none) as written and compiled (warm cache), two of each,
interleaved, each giving the median of megatron's "elapsed time per iteration" over iterations 11 to N.

    python bench/startup.py --training [--reps 5] [--iterations 40] [--json docs/bench_startup_training.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BOOTSTRAP = REPO / "sitecustomize_template"

IMPORTS = "import megatron.core.models.gpt.gpt_model, megatron.core.optimizer"
HAND_STUB = (
    "import sys, types\n"
    "m = types.ModuleType('megatron.core.transformer.moe.ops.paged_stash')\n"
    "m.GLOBAL_BLOCK_SIZE = 1024\n"
    "m.paged_stash_copy_kernel = m.paged_stash_pop_kernel = None\n"
    "sys.modules[m.__name__] = m\n"
)
IMPORT_STATEMENTS = (
    "import time\nt = time.perf_counter()\nfor _ in range(200000):\n    import os\n"
    "print((time.perf_counter() - t) / 200000 * 1e9)"
)


def _env(fl_patch: bool, **extra: str) -> dict[str, str]:
    dropped = ("MG_FL_PREFER", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k in dropped)}
    paths = [str(BOOTSTRAP)] if fl_patch else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(REPO / "src"), *extra.pop("EXTRA_PATH", "").split(os.pathsep)])
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra)
    return env


def _run(code: str | list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float]:
    """(CPU seconds of the child and the children it waited for, wall seconds); ``code``: ``-c`` code or argv."""
    started = time.perf_counter()
    argv = [sys.executable, "-c", code] if isinstance(code, str) else [sys.executable, *code]
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {str(code)[:80]!r}\n{proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
    return usage.ru_utime + usage.ru_stime, wall


def _registry(count: int, directory: Path) -> str | None:
    """A registry module of ``count`` identical copies (the oracle's catalogue), or None if it is absent."""
    catalogue = REPO / "tests" / "support" / "oracle" / "oracle_targets.json"
    if not catalogue.exists():
        return None
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "bench_startup_registry.py").write_text(
        "import json\nfrom fl_patch import register\n"
        f"for target in json.load(open({str(catalogue)!r}))['functions'][:{count}]:\n"
        "    register(target, 'oracle_impls.' + target.replace('.', '__'))\n"
    )
    return "bench_startup_registry"


TRAINING_RUN = [
    "-m", "fl_patch", str(REPO / "examples" / "pretrain_gpt_cpu.py"), "--mock-data", "--transformer-impl", "local",
    "--tokenizer-type", "NullTokenizer", "--vocab-size", "128", "--num-layers", "2", "--hidden-size", "64",
    "--num-attention-heads", "4", "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "2",
    "--global-batch-size", "4", "--train-iters", "2", "--lr", "1e-3", "--eval-interval", "2", "--eval-iters", "1",
    "--num-workers", "0",
]  # fmt: skip


def _iteration_ms(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """The median of megatron's logged "elapsed time per iteration (ms)" from the 11th iteration on."""
    proc = subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv[:3])}\n{proc.stderr[-2000:]}")
    times = [float(m) for m in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", proc.stdout)]
    return statistics.median(times[10:])


def training(reps: int, iterations: int, json_out: Path | None) -> int:
    """``--training``: a one-rank megatron.training run with megatron's fusions as written, and compiled."""
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="fl_patch_bench_training_"))
    warm_cache = str(work / "inductor_warm")
    compiled = "megatron.core.jit.jit_fuser"
    variants = {
        "CPU pack (fusions as written)": {},
        "fusions compiled, warm inductor cache": {"FL_PATCH_DISABLE": compiled, "TORCHINDUCTOR_CACHE_DIR": warm_cache},
        "fusions compiled, empty inductor cache": {"FL_PATCH_DISABLE": compiled},
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for rep in range(reps + 1):  # rep 0 warms the page cache, the bytecode caches and the warm inductor cache
        for index, (name, extra) in enumerate(variants.items()):
            env = _env(True, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29100 + index), **extra)
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(work / f"inductor_{rep}_{index}"))  # empty: a new folder
            result = _run(TRAINING_RUN, env, cwd=work)
            if rep:
                samples[name].append(result)
    base = statistics.median(c for c, _ in samples["CPU pack (fusions as written)"])
    rows = []
    print(f"{'variant':40s} {'CPU s':>7s} {'x pack':>7s} {'wall s':>7s}")
    for name, values in samples.items():
        cpu, wall = statistics.median(c for c, _ in values), statistics.median(w for _, w in values)
        rows.append(
            {"variant": name, "cpu_s": round(cpu, 3), "cpu_ratio": round(cpu / base, 3), "wall_s": round(wall, 3)}
        )
        print(f"{name:40s} {cpu:7.3f} {cpu / base:7.3f} {wall:7.3f}")
    steps: dict[str, list[float]] = {}
    if iterations > 10:
        longer = [
            *TRAINING_RUN,
            "--train-iters",
            str(iterations),
            "--eval-interval",
            str(iterations),
            "--log-interval",
            "1",
        ]
        for _ in range(2):
            for index, name in enumerate(list(variants)[:2]):  # as written; compiled with the warm cache
                env = _env(True, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29110 + index))
                env.update(variants[name], TORCHINDUCTOR_CACHE_DIR=warm_cache)
                steps.setdefault(name, []).append(_iteration_ms(longer, env, work))
        for name, values in steps.items():
            print(f"{name:40s} ms an iteration (11-{iterations}, median of each run): {values}")
    if json_out:
        summary = {"reps": reps, "command": TRAINING_RUN, "rows": rows, "load": os.getloadavg()[0]}
        summary["iteration_ms"] = {"iterations": iterations, "runs": steps}
        json_out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--registrations", type=int, default=0, help="also with a registry of N identical copies")
    parser.add_argument("--training", action="store_true", help="a whole megatron.training run instead (docstring)")
    parser.add_argument("--iterations", type=int, default=40, help="with --training: the step-time runs' length")
    args = parser.parse_args(argv)
    if args.training:
        return training(args.reps, args.iterations, args.json)
    variants = {
        "plain (hand stub)": (HAND_STUB + IMPORTS, _env(False)),
        "fl_patch, no packs": (IMPORTS, _env(True, FL_PATCH_PACKS="none")),
        "fl_patch, default packs": (IMPORTS, _env(True)),
    }
    if args.registrations:
        module = _registry(args.registrations, Path("/tmp/fl_patch_bench_startup"))
        if module is not None:
            support = os.pathsep.join(["/tmp/fl_patch_bench_startup", str(REPO / "tests" / "support" / "oracle")])
            variants[f"fl_patch, {args.registrations} registrations"] = (
                IMPORTS,
                _env(True, FL_PATCH_PACKS="none", FL_PATCH_REGISTRY=module, EXTRA_PATH=support),
            )
    for code, env in variants.values():
        _run(code, env)  # warm the page cache and the bytecode caches
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(args.reps):
        for name, (code, env) in variants.items():
            samples[name].append(_run(code, env))
    base_cpu = statistics.median(c for c, _ in samples["plain (hand stub)"])
    base_wall = statistics.median(w for _, w in samples["plain (hand stub)"])
    rows = []
    print(f"{'variant':32s} {'CPU s':>7s} {'x plain':>8s} {'wall s':>7s} {'x plain':>8s}")
    for name, values in samples.items():
        cpu = statistics.median(c for c, _ in values)
        wall = statistics.median(w for _, w in values)
        rows.append({"variant": name, "cpu_s": round(cpu, 3), "cpu_ratio": round(cpu / base_cpu, 3),
                     "wall_s": round(wall, 3), "wall_ratio": round(wall / base_wall, 3)})  # fmt: skip
        print(f"{name:32s} {cpu:7.3f} {cpu / base_cpu:8.3f} {wall:7.3f} {wall / base_wall:8.3f}")
    armed = subprocess.run(
        [sys.executable, "-c", IMPORT_STATEMENTS], env=_env(True), capture_output=True, text=True, check=True
    )
    plain = subprocess.run(
        [sys.executable, "-c", IMPORT_STATEMENTS], env=_env(False), capture_output=True, text=True, check=True
    )
    statement = {"plain_ns": round(float(plain.stdout)), "armed_ns": round(float(armed.stdout))}
    print(f"an import statement of a loaded module: {statement['plain_ns']} ns plain, {statement['armed_ns']} ns armed")
    if args.json:
        summary = {"reps": args.reps, "rows": rows, "import_statement": statement, "load": os.getloadavg()[0]}
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
