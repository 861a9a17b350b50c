"""The version table of docs/versions.md: fl_patch on each megatron-core release, measured.

For each venv (built by ``scripts/version_venvs.sh``: torch CPU, megatron-core VERSION,
this repo ``--no-deps -e``) it runs, each in a fresh process, with a time limit:

- ``check``: ``python -m fl_patch --check --json`` -> the number of errors;
- ``demo``: ``python -m fl_patch examples/train_gpt.py --steps 4`` -> last loss;
- ``pretrain_cpu``: ``python -m fl_patch examples/pretrain_gpt_cpu.py`` (the arguments below, 6 iterations);
- ``pretrain_gpt``: that release's own Megatron-LM ``pretrain_gpt.py`` (from a source tree:
  ``--megatron-lm VERSION=DIR``; only its three top-level files are used, ``megatron`` comes
  from the venv), 1 rank, 6 iterations;
- ``tp2`` / ``dp2_save_resume`` (``--distributed``): torchrun 2 ranks (gloo), TP=2; DP=2 with
  ``--use-distributed-optimizer``, save at 4, resume to 8, the resumed iterations' losses
  compared with an uninterrupted run.

- ``te_tp2_sp`` / ``te_moe_mla`` (``--configs``): the recipes' configurations, torchrun 2 ranks, 6
  iterations, the loss must fall: megatron's default TE spec at TP=2 with sequence parallelism; the TE
  spec with 4 experts top-2 (alltoall, EP=2, grouped GEMM) and multi-latent attention.

Each cell is ``ok`` (with a figure) or the last line of the error. Run::

    scripts/version_venvs.sh 0.17.1 0.18.2 0.19.2                 # .cache/venvs/VERSION
    MAIN_SRC=$MLM/main scripts/version_venvs.sh main
    .venv/bin/python bench/version_matrix.py --versions 0.17.1,0.18.2,0.19.2,main \\
        --megatron-lm 0.17.1=$MLM/core_v0.17.1 --megatron-lm 0.18.2=$MLM/core_v0.18.2 \\
        --megatron-lm 0.19.2=$MLM/core_v0.19.0 --megatron-lm main=$MLM/main [--distributed] [--json out.json]

``$MLM``: a directory of Megatron-LM trees, one per tag (``git archive`` of NVIDIA/Megatron-LM's tags
and main); ``--venvs`` (default ``.cache/venvs`` in this checkout, where ``scripts/version_venvs.sh``
builds them) names another directory of venvs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRETRAIN_FILES = ("pretrain_gpt.py", "gpt_builders.py", "model_provider.py")
PRETRAIN_ARGS = [
    "--mock-data",
    "--transformer-impl",
    "local",
    "--tokenizer-type",
    "NullTokenizer",
    "--vocab-size",
    "128",
    "--make-vocab-size-divisible-by",
    "64",
    "--num-layers",
    "2",
    "--hidden-size",
    "64",
    "--num-attention-heads",
    "4",
    "--seq-length",
    "64",
    "--max-position-embeddings",
    "64",
    "--micro-batch-size",
    "2",
    "--global-batch-size",
    "4",
    "--lr",
    "1e-3",
    "--log-interval",
    "1",
    "--eval-interval",
    "1000",
    "--eval-iters",
    "1",
    "--num-workers",
    "0",
    "--seed",
    "1234",
]
LOSS = re.compile(r"lm loss: ([0-9.E+-]+)")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k in ("MG_FL_PREFER", "PYTHONPATH"))}
    env.update(MASTER_ADDR="localhost", OMP_NUM_THREADS="1", FL_PATCH_CHILDREN="0", PYTHONWARNINGS="ignore")
    return env


def _run(cmd: list[str], cwd: Path, timeout: int, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out + f"\ntimed out after {timeout}s", time.monotonic() - start
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


def _error_line(output: str) -> str:
    """The error that ended the run: under torchrun a rank's own error, not the launcher's ChildFailedError."""
    lines = [re.sub(r"^\[(default)?rank\d+\]:\s*", "", line.strip()) for line in output.strip().splitlines()]
    lines = [line for line in lines if line and "ChildFailedError" not in line]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Missing)\b", line) or "Error:" in line:
            return line[:300]
    return (lines[-1] if lines else "no output")[:300]


def _port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def check(python: str, work: Path, timeout: int) -> dict[str, object]:
    rc, out, took = _run([python, "-m", "fl_patch", "--check", "--json"], work, timeout)
    start = out.find("{")
    try:
        data = json.loads(out[start : out.rfind("}") + 1])
    except ValueError:
        return {"ok": False, "cell": f"no report: {_error_line(out)}", "seconds": round(took, 1)}
    errors = [r for r in data["registrations"] if r["level"] == "error"]
    gated = [r for r in data["registrations"] if r["level"] == "not for this version"]
    cell = f"{len(errors)} errors" + (f", {len(gated)} not for this version" if gated else "")
    return {
        "ok": not errors and rc == 0,
        "cell": cell,
        "errors": [f"{r['target']}: {r['findings'][0]['message'] if r['findings'] else ''}"[:300] for r in errors],
        "seconds": round(took, 1),
    }


def demo(python: str, work: Path, timeout: int) -> dict[str, object]:
    cmd = [python, "-m", "fl_patch", str(REPO / "examples" / "train_gpt.py"), "--steps", "4"]
    env = _env() | {"MASTER_PORT": _port()}
    rc, out, took = _run(cmd, work, timeout, env)
    losses = re.findall(r"loss[ =:]+([0-9]+\.[0-9]+)", out)
    if rc == 0:
        return {"ok": True, "cell": f"trains (loss {losses[-1]})" if losses else "trains", "seconds": round(took, 1)}
    return {"ok": False, "cell": _error_line(out), "seconds": round(took, 1)}


def pretrain_cpu(python: str, work: Path, timeout: int) -> dict[str, object]:
    cmd = [
        python,
        "-m",
        "fl_patch",
        str(REPO / "examples" / "pretrain_gpt_cpu.py"),
        *PRETRAIN_ARGS,
        "--train-iters",
        "6",
    ]
    env = _env() | {"MASTER_PORT": _port()}
    rc, out, took = _run(cmd, work, timeout, env)
    losses = LOSS.findall(out) or re.findall(r"loss[ =:]+([0-9]+\.[0-9]+)", out)
    if rc == 0:
        return {"ok": True, "cell": f"trains (loss {losses[-1]})" if losses else "trains", "seconds": round(took, 1)}
    return {"ok": False, "cell": _error_line(out), "seconds": round(took, 1)}


def _pretrain_dir(tree: Path, work: Path) -> Path:
    run = work / "pretrain"
    run.mkdir(exist_ok=True)
    for name in PRETRAIN_FILES:
        if (tree / name).exists():
            shutil.copy(tree / name, run / name)
    # 0.17's model_provider.py imports megatron.legacy, which the megatron-core wheel does not
    # ship: the release's own megatron/legacy goes beside the script (a namespace portion of
    # `megatron`, like the wheel's, so megatron.core and megatron.training still come from the venv).
    uses_legacy = any("megatron.legacy" in (run / n).read_text() for n in PRETRAIN_FILES if (run / n).exists())
    if uses_legacy and (tree / "megatron" / "legacy").is_dir() and not (run / "megatron" / "legacy").exists():
        shutil.copytree(tree / "megatron" / "legacy", run / "megatron" / "legacy")
    return run


def pretrain_gpt(python: str, tree: Path, work: Path, timeout: int, iters: int = 6) -> dict[str, object]:
    run = _pretrain_dir(tree, work)
    cmd = [python, "-m", "fl_patch", "pretrain_gpt.py", *PRETRAIN_ARGS, "--train-iters", str(iters)]
    rc, out, took = _run(cmd, run, timeout, _env() | {"MASTER_PORT": _port()})
    losses = LOSS.findall(out)
    if rc == 0 and len(losses) >= iters:
        return {"ok": True, "cell": f"trains (loss {float(losses[-1]):.4f})", "seconds": round(took, 1)}
    return {"ok": False, "cell": _error_line(out), "seconds": round(took, 1)}


def _torchrun(python: str, run: Path, extra: list[str], timeout: int) -> tuple[int, str, float]:
    cmd = [python, "-m", "fl_patch", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return _run([*cmd, "pretrain_gpt.py", *PRETRAIN_ARGS, *extra], run, timeout, _env() | {"MASTER_PORT": _port()})


def tp2(python: str, tree: Path, work: Path, timeout: int) -> dict[str, object]:
    run = _pretrain_dir(tree, work)
    rc, out, took = _torchrun(python, run, ["--train-iters", "4", "--tensor-model-parallel-size", "2"], timeout)
    losses = LOSS.findall(out)
    if rc == 0 and losses:
        return {"ok": True, "cell": f"trains (loss {float(losses[-1]):.4f})", "seconds": round(took, 1)}
    return {"ok": False, "cell": _error_line(out), "seconds": round(took, 1)}


# The recipes' model configurations (issue "model configurations"): megatron's default TE spec (fl_patch's
# TE-compatible modules without TE), MoE with expert parallelism, multi-latent attention.
TE_SPEC = ["--transformer-impl", "transformer_engine"]
MOE_EP2 = (
    "--num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall --expert-model-parallel-size 2 "
    "--moe-ffn-hidden-size 64 --moe-grouped-gemm --disable-bias-linear"  # upstream: no bias with grouped GEMM
).split()
MLA = (
    "--multi-latent-attention --q-lora-rank 32 --kv-lora-rank 32 --qk-head-dim 16 --qk-pos-emb-head-dim 16 "
    "--v-head-dim 16 --rotary-scaling-factor 2 --position-embedding-type rope"
).split()


def _trains(rc: int, out: str, took: float, iters: int) -> dict[str, object]:
    losses = [float(x) for x in LOSS.findall(out)]
    if rc == 0 and len(losses) >= iters:
        falls = losses[-1] < losses[0]
        cell = f"trains (loss {losses[0]:.4f} -> {losses[-1]:.4f})" if falls else f"loss does not fall: {losses}"
        return {"ok": falls, "cell": cell, "seconds": round(took, 1)}
    return {"ok": False, "cell": _error_line(out), "seconds": round(took, 1)}


def te_tp2_sp(python: str, tree: Path, work: Path, timeout: int) -> dict[str, object]:
    """The TE spec at TP=2 with sequence parallelism, torchrun 2 ranks, 6 iterations."""
    run = _pretrain_dir(tree, work)
    extra = [*TE_SPEC, "--train-iters", "6", "--tensor-model-parallel-size", "2", "--sequence-parallel"]
    return _trains(*_torchrun(python, run, extra, timeout), iters=6)


def te_moe_mla(python: str, tree: Path, work: Path, timeout: int) -> dict[str, object]:
    """The TE spec, 4 experts top-2 (alltoall, EP=2, grouped GEMM) and MLA, torchrun 2 ranks, 6 iterations."""
    run = _pretrain_dir(tree, work)
    return _trains(*_torchrun(python, run, [*TE_SPEC, *MOE_EP2, *MLA, "--train-iters", "6"], timeout), iters=6)


def dp2_save_resume(python: str, tree: Path, work: Path, timeout: int) -> dict[str, object]:
    """DP=2, distributed optimizer: 8 iterations straight, and 4 + resume to 8; iterations 5-8 must match."""
    run = _pretrain_dir(tree, work)
    # One schedule for all three runs: every run says --train-iters 8 and the saving run stops at
    # 4 by --exit-interval (which saves there). Upstream refuses to resume a checkpoint whose
    # scheduler was built for another total (lr and weight-decay iterations default to
    # --train-iters; 0.17 asserts), so a shorter --train-iters for the first half cannot resume.
    base = ["--use-distributed-optimizer", "--hidden-dropout", "0.1", "--lr-warmup-iters", "2"]
    start = time.monotonic()
    rc, full, _ = _torchrun(python, run, [*base, "--train-iters", "8"], timeout)
    if rc != 0:
        return {
            "ok": False,
            "cell": f"straight run: {_error_line(full)}",
            "seconds": round(time.monotonic() - start, 1),
        }
    ckpt = str(work / "ckpt")
    rc, first, _ = _torchrun(
        python,
        run,
        [*base, "--train-iters", "8", "--exit-interval", "4", "--save", ckpt, "--save-interval", "4"],
        timeout,
    )
    if rc != 0:
        return {"ok": False, "cell": f"save: {_error_line(first)}", "seconds": round(time.monotonic() - start, 1)}
    rc, resumed, _ = _torchrun(python, run, [*base, "--train-iters", "8", "--load", ckpt], timeout)
    took = round(time.monotonic() - start, 1)
    if rc != 0:
        return {"ok": False, "cell": f"resume: {_error_line(resumed)}", "seconds": took}
    straight, again = LOSS.findall(full)[-4:], LOSS.findall(resumed)[-4:]  # iterations 5-8 of each
    # Upstream's training_log does not reset its loss accumulator at a run's first iteration
    # ("so normal interval stats remain accurate"), so the resumed run's iteration 6 logs the
    # mean of iterations 5 and 6; every other iteration logs its own loss.
    if len(straight) == len(again) == 4:
        own = [0, 2, 3]
        mean_5_6 = (float(straight[0]) + float(straight[1])) / 2
        exact = all(straight[i] == again[i] for i in own) and abs(float(again[1]) - mean_5_6) <= 5e-6 * mean_5_6
        if exact:
            shown = ", ".join(again[i] for i in own)
            return {"ok": True, "cell": f"resume exact (iterations 5, 7, 8: {shown})", "seconds": took}
    return {"ok": False, "cell": f"resume differs: straight {straight}, resumed {again}", "seconds": took}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--venvs", default=str(REPO / ".cache" / "venvs"), help="directory of venvs named by version (.cache/venvs)"
    )
    p.add_argument("--versions", default="0.17.1,0.18.2,0.19.2,main")
    p.add_argument("--megatron-lm", action="append", default=[], help="VERSION=DIR: that release's Megatron-LM tree")
    p.add_argument("--columns", default="check,demo,pretrain_cpu,pretrain_gpt")
    p.add_argument("--distributed", action="store_true", help="also tp2 and dp2_save_resume (torchrun, 2 ranks)")
    p.add_argument(
        "--configs",
        action="store_true",
        help="also te_tp2_sp and te_moe_mla (TE spec, MoE EP=2, MLA; torchrun 2 ranks)",
    )
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    trees = dict(item.split("=", 1) for item in args.megatron_lm)
    columns = args.columns.split(",") + (["tp2", "dp2_save_resume"] if args.distributed else [])
    columns += ["te_tp2_sp", "te_moe_mla"] if args.configs else []
    results: dict[str, dict[str, dict[str, object]]] = {}
    for version in args.versions.split(","):
        python = str(Path(args.venvs) / version / "bin" / "python")
        if not Path(python).exists():
            results[version] = {c: {"ok": False, "cell": f"no venv {python}"} for c in columns}
            continue
        row: dict[str, dict[str, object]] = {}
        tree = Path(trees[version]) if version in trees else None
        for column in columns:
            with tempfile.TemporaryDirectory(prefix=f"vm-{version}-") as tmp:
                work = Path(tmp)
                if column in ("check", "demo", "pretrain_cpu"):
                    row[column] = globals()[column](python, work, args.timeout)
                elif tree is None:
                    row[column] = {"ok": False, "cell": "no Megatron-LM tree given (--megatron-lm)"}
                else:
                    row[column] = globals()[column](python, tree, work, args.timeout)
            print(f"{version:8} {column:16} {row[column]['cell']}  ({row[column].get('seconds', '-')} s)", flush=True)
        results[version] = row
    print("\n| version | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for version, row in results.items():
        print(f"| {version} | " + " | ".join(str(row[c]["cell"]).replace("|", "/") for c in columns) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(cell["ok"] for row in results.values() for cell in row.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
