"""A CUDA training script as people write them for a GPU, and the same computation written for the CPU.

``--device cuda`` is the script as written for a GPU machine: ``torch.cuda.set_device(local_rank)``,
``init_process_group("nccl")``, ``torch.cuda.manual_seed``, ``model.cuda()``, DDP with
``device_ids=[local_rank]``, pinned host batches copied on a side stream, ``record_stream``,
CUDA events for timing, ``torch.cuda.synchronize()``, ``device="cuda"`` tensors,
``torch.autocast("cuda")``, ``GradScaler("cuda")``, the CUDA RNG state saved and restored,
memory statistics. ``--device cpu`` is the same computation as one would write it for the
CPU (gloo, ``torch.manual_seed``, CPU tensors, no streams). It imports megatron-core and
builds its parallel state, as a Megatron job does (fl_patch activates at that import).

Each rank appends one JSON line per step to ``--out``: its loss (all-reduced mean), the
device its parameters are on, and whether a replayed dropout mask was identical.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--out", required=True)
args = parser.parse_args()

rank = int(os.environ.get("RANK", "0"))
world_size = int(os.environ.get("WORLD_SIZE", "1"))
local_rank = int(os.environ.get("LOCAL_RANK", "0"))
cuda = args.device == "cuda"

if cuda:
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
else:
    device = torch.device("cpu")
    dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)
parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)

torch.manual_seed(1234)
if cuda:
    torch.cuda.manual_seed(1234)

model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 4))
if cuda:
    model = model.cuda()
    ddp = DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank)
else:
    ddp = DistributedDataParallel(model)
optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler(args.device)
data = torch.Generator().manual_seed(100 + rank)
side_stream = torch.cuda.Stream() if cuda else None

for step in range(args.steps):
    x_host = torch.randn(8, 16, generator=data)
    y_host = torch.randint(0, 4, (8,), generator=data)
    if cuda:
        x_host, y_host = x_host.pin_memory(), y_host.pin_memory()
        with torch.cuda.stream(side_stream):
            x = x_host.to(device, non_blocking=True)
            y = y_host.cuda(non_blocking=True)
        torch.cuda.current_stream().wait_stream(side_stream)
        x.record_stream(torch.cuda.current_stream())
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        rng_state = torch.cuda.get_rng_state()
    else:
        x, y = x_host, y_host
        rng_state = torch.get_rng_state()

    # The same dropout mask twice: the saved RNG state restored.
    first = torch.nn.functional.dropout(torch.ones(64, device="cuda" if cuda else "cpu"), 0.5)
    if cuda:
        torch.cuda.set_rng_state(rng_state)
    else:
        torch.set_rng_state(rng_state)
    replayed = torch.nn.functional.dropout(torch.ones(64, device="cuda" if cuda else "cpu"), 0.5)

    with torch.autocast(device_type=args.device, dtype=torch.bfloat16):
        logits = ddp(x)
    loss = torch.nn.functional.cross_entropy(logits.float(), y)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()

    total = torch.zeros((), device="cuda" if cuda else "cpu")
    total += loss.detach()
    dist.all_reduce(total)
    if cuda:
        end.record()
        torch.cuda.synchronize()
        elapsed = start.elapsed_time(end)
        torch.cuda.reset_peak_memory_stats()
        peak = torch.cuda.max_memory_allocated()
    else:
        elapsed, peak = 0.0, 0
    with open(args.out, "a", encoding="utf-8") as out:
        record = {
            "rank": rank,
            "step": step,
            "loss": (total / world_size).item(),
            "param_device": str(next(model.parameters()).device),
            "replayed_same_mask": bool(torch.equal(first, replayed)),
            "elapsed_ms_nonnegative": elapsed >= 0.0,
            "peak_memory": peak,
            "scale": scaler.get_scale(),
        }
        out.write(json.dumps(record) + "\n")

parallel_state.destroy_model_parallel()
dist.destroy_process_group()
