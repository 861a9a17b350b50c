"""A pure-torch CUDA snippet (no megatron): run with ``FL_PATCH_TRIGGERS=torch python -m fl_patch``.

Prints one JSON line with what each CUDA call gave. Used by hand and on a CUDA build of torch
with no visible GPU (``CUDA_VISIBLE_DEVICES=``), where the vendor is also ``cpu``.
"""

from __future__ import annotations

import json

import torch

torch.cuda.set_device(0)
torch.cuda.manual_seed(3)
drawn = torch.rand(2, device="cuda")
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    moved = torch.ones(2).pin_memory().to("cuda", non_blocking=True)
torch.cuda.current_stream().wait_stream(side)
moved.record_stream(torch.cuda.current_stream())
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
model = torch.nn.Linear(2, 2).cuda()
end.record()
torch.cuda.synchronize()
print(
    json.dumps(
        {
            "is_available": torch.cuda.is_available(),
            "device_count": torch.cuda.device_count(),
            "drawn_device": drawn.device.type,
            "seeded": torch.equal(drawn, torch.rand(2, generator=torch.Generator().manual_seed(3))),
            "moved_device": moved.device.type,
            "model_device": next(model.parameters()).device.type,
            "elapsed_ok": start.elapsed_time(end) >= 0.0,
        }
    )
)
