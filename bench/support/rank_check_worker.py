"""A torchrun worker for bench/rank_check.py. Prints one ``BENCH{json}`` line on rank 0.

``--part protocol``: plain torch (run with FL_PATCH=0); ``check_group`` alone, ``--reps`` times, each
started together after a barrier, with a state of ``--rows`` rows (the CPU pack's size).
``--part job``: under fl_patch (all packs); megatron-core imported, then ``init_process_group`` +
``initialize_model_parallel(tp=2)``: its wall time, the time this rank spent in the checks (each
timed), how many, and the digest (``patch_state``) cold and warm.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--part", choices=("protocol", "job"), required=True)
parser.add_argument("--reps", type=int, default=50)
parser.add_argument("--rows", type=int, default=225)
args = parser.parse_args()

if args.part == "protocol":
    import torch.distributed as dist

    from fl_patch.job.digest import PatchState
    from fl_patch.job.rank_check import check_group

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    rows = {
        f"megatron.core.module{i}.function{i}": f"cpu fl_patch.impls.cpu.module{i}.impl @0123456789ab"
        for i in range(args.rows)
    }
    state = PatchState(rows)
    times = []
    for i in range(args.reps):
        dist.barrier()
        start = time.perf_counter()
        check_group(store, "bench", list(range(world)), rank, state, 60.0, prefix=f"bench/{i}/")
        times.append(time.perf_counter() - start)
    gathered: list[object] = [None] * world
    dist.all_gather_object(gathered, times)
    if rank == 0:
        slowest = [max(t[i] for t in gathered) for i in range(args.reps)]  # type: ignore[index]
        record = {
            "part": "protocol",
            "world": world,
            "rows": args.rows,
            "reps": args.reps,
            "median_ms": statistics.median(slowest) * 1e3,
            "p90_ms": sorted(slowest)[int(0.9 * (args.reps - 1))] * 1e3,
            "state_bytes": len(state.to_json()),
        }
        print("BENCH" + json.dumps(record), flush=True)
    dist.destroy_process_group()
else:
    import torch.distributed as dist
    from megatron.core import parallel_state

    import fl_patch
    from fl_patch.job import digest, rank_check
    from fl_patch.runtime import RUNTIME

    # The time this rank spends in the check (its state, the store, the wait for the others), check by check:
    # measured inside the process, so other load on the machine shifts it less than comparing whole launches.
    spent: list[float] = []
    checked = rank_check._checked

    def timed(*a: object, **k: object) -> None:
        start = time.perf_counter()
        try:
            checked(*a, **k)  # type: ignore[arg-type]
        finally:
            spent.append(time.perf_counter() - start)

    rank_check._checked = timed  # type: ignore[assignment]
    start = time.perf_counter()
    dist.init_process_group("gloo")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
    elapsed = time.perf_counter() - start
    digest._HASHES.clear()
    digest._FILES.clear()
    digest._LAST.clear()
    digest._version.cache_clear()
    cold = time.perf_counter()
    state = digest.patch_state(RUNTIME.settings)
    cold = time.perf_counter() - cold
    warm = time.perf_counter()
    digest.patch_state(RUNTIME.settings)
    warm = time.perf_counter() - warm
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (elapsed, sum(spent), len(spent), statistics.median(spent) if spent else 0.0))
    if dist.get_rank() == 0:
        record = {
            "part": "job",
            "world": dist.get_world_size(),
            "init_s": max(g[0] for g in gathered),  # type: ignore[index]
            "check_s": max(g[1] for g in gathered),  # type: ignore[index]
            "checks_rank0": gathered[0][2],  # type: ignore[index]
            "check_median_ms": statistics.median(g[3] for g in gathered) * 1e3,  # type: ignore[index]
            "rows": len(state.rows),
            "digest_cold_ms": cold * 1e3,
            "digest_warm_ms": warm * 1e3,
            "installed": fl_patch.is_installed(),
            "loadavg": os.getloadavg()[0],
        }
        print("BENCH" + json.dumps(record), flush=True)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()
sys.exit(0)
