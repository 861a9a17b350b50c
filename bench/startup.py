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
"""

from __future__ import annotations

import argparse
import json
import os
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


def _run(code: str, env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds of the child, wall seconds)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {code[:80]!r}\n{proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--registrations", type=int, default=0, help="also with a registry of N identical copies")
    args = parser.parse_args(argv)
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
