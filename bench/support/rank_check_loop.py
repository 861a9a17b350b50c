"""20 initialize_model_parallel(1, 1) + destroy_model_parallel() cycles at world size 1 (gloo): CPU and wall time.

Run under ``python -m fl_patch`` with or without a large registry (ORACLE_FINDINGS.md, finding 12), e.g.
``FL_PATCH_REGISTRY=oracle_registry PYTHONPATH=src:tests/support/oracle python -m fl_patch bench/support/rank_check_loop.py``
(``ORACLE_OFF=1``: the same with nothing registered).
"""

from __future__ import annotations

import os
import resource
import time

import torch.distributed as dist
from megatron.core import parallel_state

CYCLES = 20


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29577")
    dist.init_process_group("gloo", rank=0, world_size=1)
    cpu, wall = cpu_seconds(), time.perf_counter()
    for _ in range(CYCLES):
        parallel_state.initialize_model_parallel(1, 1)
        parallel_state.destroy_model_parallel()
    print(f"LOOP cpu {cpu_seconds() - cpu:.2f} s wall {time.perf_counter() - wall:.2f} s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
