"""Threads, memory and live process groups over megatron init/destroy cycles, on the CPU (gloo).

Megatron-LM's unit tests (and a notebook, or an elastic restart) call
``parallel_state.initialize_model_parallel`` / ``destroy_model_parallel`` again and again in
one process. With NCCL mapped to gloo, every group megatron created used to stay alive
after ``destroy_model_parallel`` (torch's ``_world`` keeps each group until
``destroy_process_group(group)``; megatron only drops its own references), and each gloo
group holds its worker threads and sockets: ~20 groups and ~60 threads per cycle at world
size 2 (issue 27). This benchmark runs the cycles and samples, every ``--every`` cycles, the
process's threads (``/proc/self/task``), resident memory (``VmRSS``) and torch's live groups
(``len(_world.pg_map)``), per rank.

Each cycle alternates tensor-parallel sizes 1 and ``world size`` (so the groups differ from
one cycle to the next) and runs one all-reduce on the tensor-parallel group, so the groups
are used, not only created.

Run (world size 2; rank 0 prints a table and writes ``--json``)::

    .venv/bin/python -m fl_patch -m torch.distributed.run --standalone --nproc-per-node 2 \\
        bench/group_cycles.py --cycles 1000 --every 100 --json docs/bench_group_cycles.json
    # upstream behaviour, for comparison (the fix off):
    FL_PATCH_DISABLE=megatron.core.parallel_state.destroy_model_parallel .venv/bin/python -m fl_patch \\
        -m torch.distributed.run --standalone --nproc-per-node 2 bench/group_cycles.py --cycles 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from torch.distributed import distributed_c10d as c10d

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl")  # gloo under the CUDA-on-CPU transfer
    world, rank = dist.get_world_size(), dist.get_rank()
    # What each rank's torch.cuda says under the launcher (one "GPU" per local rank).
    devices: list[dict[str, int] | None] = [None] * world
    dist.all_gather_object(
        devices, {"device_count": torch.cuda.device_count(), "current_device": torch.cuda.current_device()}
    )
    samples: list[dict[str, float]] = []

    def sample(cycle: int, start: float) -> None:
        row = {
            "cycle": cycle,
            "threads": _threads(),
            "rss_mib": round(_rss_mib(), 1),
            "groups": len(c10d._world.pg_map),
            "seconds": round(time.perf_counter() - start, 1),
        }
        gathered: list[dict[str, float] | None] = [None] * world
        dist.all_gather_object(gathered, row)
        samples.append({"cycle": cycle, "ranks": gathered})  # type: ignore[dict-item]
        if rank == 0:
            cells = "  ".join(
                f"r{i}: {g['threads']:>5} thr {g['rss_mib']:>7.1f} MiB {g['groups']:>5} grp"
                for i, g in enumerate(gathered)
            )  # type: ignore[index]
            print(f"cycle {cycle:>5} ({row['seconds']:>6.1f} s)  {cells}", flush=True)

    start = time.perf_counter()
    sample(0, start)
    for cycle in range(1, args.cycles + 1):
        tp = world if cycle % 2 else 1
        ps.initialize_model_parallel(tensor_model_parallel_size=tp)
        t = torch.ones(4, device="cuda")
        dist.all_reduce(t, group=ps.get_tensor_model_parallel_group())
        if t[0].item() != tp:
            raise SystemExit(f"all-reduce over the tensor-parallel group gave {t[0].item()}, expected {tp}")
        ps.destroy_model_parallel()
        if cycle % args.every == 0:
            sample(cycle, start)
    if rank == 0 and args.json is not None:
        record = {
            "devices": devices,
            "command": "python -m fl_patch -m torch.distributed.run --standalone --nproc-per-node "
            f"{world} bench/group_cycles.py --cycles {args.cycles} --every {args.every}",
            "fl_patch_disable": os.environ.get("FL_PATCH_DISABLE", ""),
            "world_size": world,
            "torch": torch.__version__,
            "samples": samples,
        }
        args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
