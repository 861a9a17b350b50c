"""A torchrun worker: joins a gloo group, imports real megatron.core, reports the patch per rank."""

from __future__ import annotations

import json
import sys

import torch.distributed as dist

import fl_patch

if __name__ == "__main__":
    dist.init_process_group("gloo")
    from megatron.core import utils

    result = utils.divide(6, 3)
    (record,) = [
        r for r in fl_patch.report() if r.target == "megatron.core.utils.divide" and r.vendor == r.chosen_vendor
    ]
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, result)
    report = {
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "installed": fl_patch.is_installed(),
        "divide": list(result) if isinstance(result, tuple) else result,
        "status": record.status.value,
        "late": record.late,
        "gathered": [list(g) if isinstance(g, tuple) else g for g in gathered],
    }
    sys.stdout.write("ACT" + json.dumps(report) + "\n")
    sys.stdout.flush()
    dist.destroy_process_group()
