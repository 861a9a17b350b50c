"""Run under ``python -m fl_patch``: the transfer while installed, then every original back after ``uninstall()``.

Prints one JSON line: what CUDA calls did while installed (``during``), the targets whose
original object did not come back (``restored``, expected empty) and what CUDA calls do
after ``uninstall()`` (``after``: upstream again, raising on this CPU-only torch). ``torch.cuda.set_device`` is
not called before megatron: its stand-in (``activation/cuda_use.py``) gives way to the transfer, which patches
torch's own, and ``uninstall()`` leaves torch's own (``after`` says so).
"""

from __future__ import annotations

import json
import os

import torch
import torch.amp.autocast_mode
import torch.cuda.random
import torch.distributed as dist
import torch.utils._device
from torch.cuda import manual_seed as seed_bound_before_install

from fl_patch.impls.cpu import cuda_stand_ins
from fl_patch.impls.cuda_on_cpu import registry as cuda_on_cpu_registry

_ABSENT = object()


def _holder_and_name(target: str) -> tuple[object, str]:
    import importlib

    parts = target.split(".")
    for end in range(len(parts) - 1, 0, -1):
        try:
            holder: object = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attr in parts[end:-1]:
            holder = getattr(holder, attr)
        return holder, parts[-1]
    raise LookupError(target)


def _own(target: str) -> object:
    holder, name = _holder_and_name(target)
    return vars(holder).get(name, _ABSENT)


TARGETS = [t for t, *_ in cuda_on_cpu_registry.TORCH_TARGETS] + ["torch.cuda.manual_seed", "torch.cuda.get_rng_state"]
before = {target: _own(target) for target in TARGETS}
# Until megatron loads, torch.cuda.set_device is fl_patch's stand-in (activation/cuda_use.py), which puts torch's
# own back when the packs load: torch's own (its __wrapped__) is what uninstall() must leave there.
before["torch.cuda.set_device"] = getattr(
    before["torch.cuda.set_device"], "__wrapped__", before["torch.cuda.set_device"]
)
set_device_stand_in = torch.cuda.set_device
set_device_torchs = getattr(set_device_stand_in, "__wrapped__", None)

import megatron.core  # noqa: E402,F401  (fl_patch installs at the first megatron import)

import fl_patch  # noqa: E402

assert fl_patch.is_installed()
set_device_transferred = torch.cuda.set_device


def _raises(call: object) -> bool:
    try:
        call()  # type: ignore[operator]
    except Exception:  # noqa: BLE001
        return True
    return False


# Run with LOCAL_WORLD_SIZE=2 (as torchrun sets it): two "devices", ordinal 2 refused.
torch.cuda.set_device(1)
set_device_beyond_count_raises = _raises(lambda: torch.cuda.set_device(torch.cuda.device_count()))
with torch.device("cuda"):
    in_context = torch.empty(1).device.type
torch.cuda.manual_seed(7)
drawn = torch.rand(3)
with torch.autocast("cuda"):
    autocast_dtype = torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype
dist.init_process_group(backend="nccl", rank=0, world_size=1)
backend = dist.get_backend()
# a mesh on "cuda" (FSDP2, megatron-fsdp): gloo groups on the CPU; the impl finds torch's function through the
# engine, not the (patched) module attribute, which recursed without end
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402

mesh_device = init_device_mesh("cuda", (1,)).device_type
dist.destroy_process_group()
during = {
    "is_available": torch.cuda.is_available(),
    "device_count": torch.cuda.device_count(),
    "current_device_after_set_device_1": torch.cuda.current_device(),
    "set_device_beyond_count_raises": set_device_beyond_count_raises,
    "zeros": torch.zeros(2, device="cuda").device.type,
    "generator": torch.Generator(device="cuda").device.type,
    "generator_is_a_generator": isinstance(torch.Generator(device="cuda:1"), before["torch.Generator"]),
    "to_cuda": torch.ones(2).to("cuda:1").device.type,
    # pinned host memory for a 'device' that is the host: ordinary memory, not torch's "no accelerator" error
    "pinned_empty": str(torch.empty(2, pin_memory=True).device),
    "pinned_tensor_to_cuda": torch.tensor([1.0], pin_memory=True).to("cuda", non_blocking=True).device.type,
    "pinned_new_empty": torch.ones(1).new_empty(2, pin_memory=True).device.type,
    "to_ordinal": torch.ones(2).to(0).device.type,
    "new_zeros": torch.ones(1).new_zeros(3, device=torch.device("cuda", 0)).device.type,
    "module_to": next(torch.nn.Linear(2, 2).to("cuda").parameters()).device.type,
    "device_context": in_context,
    "alias_bound_before_install_rebound": seed_bound_before_install is torch.cuda.random.manual_seed,
    "stream_is_the_stand_in": isinstance(torch.cuda.Stream(), cuda_stand_ins.Stream),
    "event_is_the_stand_in": isinstance(torch.cuda.Event(enable_timing=True), cuda_stand_ins.Event),
    "cuda_seed_seeds_the_cpu_generator": torch.equal(drawn, torch.rand(3, generator=torch.Generator().manual_seed(7))),
    "autocast_dtype": str(autocast_dtype),
    "backend": backend,
    "mesh_device": mesh_device,
    "memory_allocated": torch.cuda.memory_allocated(),
    "capability_raises": _raises(torch.cuda.get_device_capability),
    "problems": [
        f"{r.target}: {r.detail}"
        for r in fl_patch.report()
        if r.vendor == "cpu" and r.status.value in ("target missing", "impl failed")
    ],
}

fl_patch.uninstall()
restored = [target for target in TARGETS if _own(target) is not before[target]]
if seed_bound_before_install is not before["torch.cuda.random.manual_seed"]:
    restored.append("the script's own alias of torch.cuda.manual_seed")
after = {
    "zeros_raises": _raises(lambda: torch.zeros(1, device="cuda")),
    "generator_raises": _raises(lambda: torch.Generator(device="cuda")),
    "pinned_empty_raises": _raises(lambda: torch.empty(2, pin_memory=True)),
    "set_device_raises": _raises(lambda: torch.cuda.set_device(0)),
    "is_available": torch.cuda.is_available(),
    # Read after uninstall(): while installed, set_device_torchs (bound before) is rebound as any alias is. Before
    # megatron a stand-in over torch's own; installed, the transfer's (neither); after uninstall(), torch's own.
    "set_device_was_a_stand_in": set_device_torchs is not None and set_device_stand_in is not set_device_torchs,
    "set_device_transferred": set_device_transferred not in (set_device_stand_in, set_device_torchs),
    "set_device_is_torchs": torch.cuda.set_device is set_device_torchs,
}
print(json.dumps({"during": during, "restored": restored, "after": after, "pid": os.getpid()}))
