"""What the rank check costs (``fl_patch/job/rank_check.py``), at 2, 4 and 8 ranks on this machine's CPU.

Two measurements, each under ``torchrun --standalone`` with gloo:

- ``protocol``: the check alone (``check_group``: six store operations per rank, and the wait for the
  slowest) with a state of 225 rows, the size of the CPU pack's; ``--reps`` checks started together
  after a barrier; the median and 90th percentile of the slowest rank's time.
- ``job``: megatron-core imported under fl_patch (all packs), then ``init_process_group`` +
  ``initialize_model_parallel(tensor_model_parallel_size=2)``: the time each rank spends inside the
  checks (each check timed in the process: comparing whole launches measured the machine's other
  load, not the check), the slowest rank's, of the whole; how many checks rank 0 made; the digest
  (``patch_state``) cold (impl files hashed) and warm. The run with the least time in the checks of
  ``--job-reps`` is printed (the machine is shared: the least is the least disturbed).

Usage: ``python bench/rank_check.py [--ranks 2 4 8] [--reps 50] [--job-reps 2] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "bench" / "support" / "rank_check_worker.py"


def _torchrun(nproc: int, part_args: list[str], env_extra: dict[str, str], under_fl_patch: bool) -> dict[str, object]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("FL_PATCH", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_"))
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    env["PYTHONWARNINGS"] = "ignore"
    env.update(env_extra)
    launcher = [sys.executable, "-m", "fl_patch"] if under_fl_patch else [sys.executable]
    cmd = [
        *launcher,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        str(WORKER),
        *part_args,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("BENCH")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][5:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--job-reps", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: list[dict[str, object]] = []
    for nproc in args.ranks:
        record = _torchrun(nproc, ["--part", "protocol", "--reps", str(args.reps)], {"FL_PATCH": "0"}, False)
        results.append(record)
        print(
            f"{nproc} ranks, the check alone: median {record['median_ms']:.2f} ms, p90 {record['p90_ms']:.2f} ms",
            flush=True,
        )
    for nproc in args.ranks:
        runs = [_torchrun(nproc, ["--part", "job"], {}, True) for _ in range(args.job_reps)]
        best = min(runs, key=lambda r: float(r["check_s"]))  # type: ignore[arg-type]
        results.append({"part": "job", "world": nproc, "runs": runs})
        print(
            f"{nproc} ranks, init_process_group + initialize_model_parallel(tp=2): {best['checks_rank0']} checks on "
            f"rank 0, {float(best['check_s']) * 1e3:.0f} ms in them on the slowest rank (median "
            f"{float(best['check_median_ms']):.1f} ms a check) of {float(best['init_s']) * 1e3:.0f} ms; digest of "
            f"{best['rows']} rows {float(best['digest_cold_ms']):.1f} ms cold, {float(best['digest_warm_ms']):.1f} ms "
            f"warm (load average {float(best['loadavg']):.1f})",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
