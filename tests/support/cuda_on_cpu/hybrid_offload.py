"""``--optimizer-cpu-offload``'s HybridDeviceOptimizer under the CUDA-on-CPU transfer: run with ``python -m fl_patch``.

A model moved to "cuda" (the host here), half its parameters offloaded (host copies stepped by the CPU optimizer
and copied back), half stepped in place, against torch's Adam on a copy: fp32, and bf16 with fp32 masters. Prints
one JSON line: the largest difference per dtype, or the error upstream raised.
"""

from __future__ import annotations

import copy
import json

import torch
from megatron.core.optimizer.cpu_offloading import HybridDeviceOptimizer


def largest_difference(dtype: torch.dtype) -> dict[str, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(dtype).cuda()
    reference = copy.deepcopy(model).float()
    initial = [p.detach().float().clone() for p in model.parameters()]
    hybrid = HybridDeviceOptimizer(
        list(model.parameters()),
        offload_fraction=0.5,
        cpu_optimizer_cls=torch.optim.Adam,
        gpu_optimizer_cls=torch.optim.Adam,
        param_update_in_fp32=dtype != torch.float32,
        lr=1e-2,
    )
    adam = torch.optim.Adam(reference.parameters(), lr=1e-2)
    offloaded = list(hybrid.gpu_params_map_cpu_copy)
    for step in range(3):
        x = torch.randn(5, 8, generator=torch.Generator().manual_seed(step)).cuda()
        model(x.to(dtype)).sum().backward()
        reference(x).sum().backward()
        hybrid.step()
        adam.step()
        hybrid.zero_grad()
        adam.zero_grad()
    moved = [
        float((p.float() - q).abs().max()) for p, q in zip(model.parameters(), reference.parameters(), strict=True)
    ]
    return {
        "offloaded": len(offloaded),
        "in_place": sum(len(g["params"]) for g in hybrid.gpu_param_groups),
        "copies_distinct": all(hybrid.gpu_params_map_cpu_copy[p] is not p for p in offloaded),
        "max_difference": max(moved),
        # every parameter moved: the offloaded ones were copied back after their host step
        "least_change": min(
            float((p.float() - q).abs().max()) for p, q in zip(model.parameters(), initial, strict=True)
        ),
    }


out: dict[str, object] = {}
for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
    try:
        out[name] = largest_difference(dtype)
    except Exception as exc:  # noqa: BLE001  (what upstream raises without the patch is the result)
        out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
print(json.dumps(out))
