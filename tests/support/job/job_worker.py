"""A rank of a job: imports megatron (fl_patch installs), creates the default group and a new group, says what it saw.

``--init-first``: the default group is created before the first megatron import (before fl_patch installs).
Prints ``JOB{json}`` on success (with the status of the rank check's patch and of job_registry's in this process);
a failed rank check raises out of the group's creation (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--init-first", action="store_true")
parser.add_argument(
    "--fail-once", type=int, default=None, help="this rank dies (exit 3) on the first attempt (torchrun restarts)"
)
args = parser.parse_args()

import torch  # noqa: E402

if args.fail_once is not None and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
    if int(os.environ["RANK"]) == args.fail_once:
        # Ends as a rank that fails before its first megatron import does (its exit handlers run, fl_patch's exit
        # report among them), before it joins a process group: the attempt fails, torchrun restarts both ranks.
        raise SystemExit(3)

import torch.distributed as dist  # noqa: E402

if args.init_first:
    dist.init_process_group("gloo")
from megatron.core import utils  # noqa: E402  (fl_patch installs here)

import fl_patch  # noqa: E402

if not args.init_first:
    dist.init_process_group("gloo")
group = dist.new_group(list(range(dist.get_world_size())))
value = torch.tensor([float(utils.divide(6, 3))])
dist.all_reduce(value, group=group)
records = [r for r in fl_patch.report() if r.vendor == r.chosen_vendor]
checks = [r for r in records if r.target.endswith("_new_process_group_helper")]
divides = [r for r in records if r.target == "megatron.core.utils.divide"]
line = {
    "rank": dist.get_rank(),
    "world": dist.get_world_size(),
    "sum": value.item(),
    "restart": os.environ.get("TORCHELASTIC_RESTART_COUNT"),
    "check": checks[0].status.value if checks else None,
    "divide": divides[0].status.value if divides else None,  # job_registry's patch
    "installed": fl_patch.is_installed(),
}
sys.stdout.write("JOB" + json.dumps(line) + "\n")  # one write: the ranks share the pipe
sys.stdout.flush()
dist.destroy_process_group()
