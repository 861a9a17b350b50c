"""The pack ``cuda_on_cpu``: the CUDA-on-CPU transfer, so that unmodified CUDA code around megatron runs on the CPU.

Vendor ``cpu`` (chosen where no accelerator is found, or with ``MG_FL_PREFER=cpu``), so these
registrations apply only on a machine without a GPU; it builds on the CPU pack's stand-ins
(``cpu/cuda_stand_ins.py``, ``cpu/cuda_names.py``). Like every pack registry it calls ``register()``
with strings only and imports neither torch nor megatron.

What it patches: the tables below, top to bottom, one ``PatchDoc`` per concern: ``torch.cuda.*``,
devices in torch's factories and ``Tensor.to``, NCCL, autocast and the grad scaler for code around
megatron (impls in ``transfer.py``, the shared stand-ins in ``cpu/cuda_stand_ins.py``), and the
Transformer Engine layer-spec functions, which build megatron-core's local specs where neither TE nor
the TE-compatible layers are there (``local_specs.py``). :func:`register_pack` registers them all,
under ``CUDA_ON_CPU_ON``.

The switch (``docs/cuda_on_cpu.md``): the transfer is on by default; ``FL_PATCH_CUDA_ON_CPU=0``
(``--no-cuda-on-cpu``) turns it off, and so does a ``FL_PATCH_PACKS`` list without
``cuda_on_cpu`` (``--packs cpu``: the CPU pack's megatron patches alone).
"""

from __future__ import annotations

from collections.abc import Mapping

from fl_patch import PatchDoc, register
from fl_patch.impls.conditions import CUDA_ON_CPU_ON
from fl_patch.impls.cpu.cuda_names import FACTORY_NAMES, RNG_NAMES

__all__ = [
    "MEGATRON_TARGETS",
    "SWITCH",
    "TORCH_ROOT_TARGETS",
    "TORCH_SUBMODULE_TARGETS",
    "TORCH_TARGETS",
    "register_pack",
    "transfer_enabled",
]

SWITCH = "FL_PATCH_CUDA_ON_CPU"
"""The environment variable that turns the transfer off (``0``/``false``/``no``/``off``)."""

_CPU = "cpu"
_T = "fl_patch.impls.cuda_on_cpu.transfer"
_S = "fl_patch.impls.cpu.cuda_stand_ins"
_M = "fl_patch.impls.cuda_on_cpu.local_specs"
_TORCH = "torch 2.13"
_ACCELERATOR = "the code around megatron selects its device through torch.accelerator"


def _doc(why: str, how: str, upstream: str, remove_when: str = _ACCELERATOR) -> PatchDoc:
    return PatchDoc(why=why, how=how, upstream=upstream, remove_when=remove_when)


_RAISES = "on a CPU-only torch it raises"
FACTORIES = _doc(
    "CUDA code allocates with torch.zeros(..., device='cuda') and 25 other factories; " + _RAISES + " ('Torch "
    "not compiled with CUDA enabled').",
    "a CUDA device becomes the CPU (pin_memory=True ordinary memory); every other argument passes unchanged.",
    f"{_TORCH} torch/_torch_docs.py (the factories' device keyword)",
)
TENSOR_TO = _doc(
    "CUDA code moves tensors with t.to('cuda'), t.to(torch.device('cuda', rank)), t.to(current_device()) (an "
    "ordinal), and nn.Module.to goes through it; " + _RAISES + ".",
    "a CUDA device, positional or device=, becomes the CPU; dtypes, other tensors and other devices pass through.",
    f"{_TORCH} Tensor.to",
)
TENSOR_NEW = _doc(
    "t.new_zeros(..., device='cuda') and the other new_* methods; " + _RAISES + ".",
    "a CUDA device becomes the CPU.",
    f"{_TORCH} Tensor.new_empty/new_full/new_ones/new_tensor/new_zeros",
)
PIN_MEMORY = _doc(
    "CUDA code pins host buffers for asynchronous copies (t.pin_memory()); without an accelerator torch raises "
    "'Cannot access accelerator device when none is available'.",
    "the tensor itself, unpinned (is_pinned() says False, truthfully): there is no device to copy to.",
    f"{_TORCH} Tensor.pin_memory",
    "callers pin only when torch.accelerator.is_available()",
)
GENERATOR = _doc(
    "torch.Generator(device='cuda') raises 'Cannot get CUDA generator without ATen_cuda library'.",
    "a CUDA device becomes the CPU; the object is a torch.Generator subclass, so isinstance and generator= "
    "arguments take it as before.",
    f"{_TORCH} torch._C.Generator",
    "the callers take the generator's device from their tensors",
)
RECORD_STREAM = _doc(
    "t.record_stream(torch.cuda.current_stream()) with the CPU's stand-in stream: torch raises 'unknown "
    "parameter type'.",
    "nothing to do for a stand-in stream (CPU memory is freed with its last reference); any other stream goes to "
    "torch.",
    f"{_TORCH} Tensor.record_stream",
    "no CUDA stream stand-in is needed",
)
DEVICE_COUNT = _doc(
    "CUDA code picks its device with set_device(rank % torch.cuda.device_count()): 0 on a CPU-only torch, a "
    "ZeroDivisionError; Megatron-LM's tests take the world size from device_count().",
    "what a node with one GPU per local rank reports: the launcher's LOCAL_WORLD_SIZE, else 1 (the CPU is the "
    "one 'CUDA' device).",
    f"{_TORCH} torch/cuda/__init__.py (device_count)",
    "the callers count devices with torch.accelerator.device_count",
)
DEVICE_SELECTION = _doc(
    "every CUDA script starts with torch.cuda.set_device(local_rank) and allocates on current_device(), or "
    "enters `with torch.cuda.device(i)`; " + _RAISES + ".",
    "every ordinal below device_count() names the CPU: set_device keeps it for current_device(), the context "
    "changes nothing; an ordinal at or above the count raises as torch does.",
    f"{_TORCH} torch/cuda/__init__.py (set_device, current_device, device)",
    "the callers use torch.accelerator.set_device_index / current_device_index / device_index",
)
DEVICE_NAME = _doc(
    "CUDA scripts log torch.cuda.get_device_name(); " + _RAISES + ".",
    "the name of what the device is, the CPU (properties and capability stay torch's own: no invented GPU).",
    f"{_TORCH} torch/cuda/__init__.py (get_device_name)",
)
SYNCHRONIZE = _doc(
    "CUDA code waits for the GPU (timing, before host reads, Megatron-LM's test utilities before every barrier); "
    + _RAISES
    + ".",
    "nothing to wait for: CPU work is complete when the call that did it returns.",
    f"{_TORCH} torch/cuda/__init__.py (synchronize)",
)
IPC_COLLECT = _doc(
    "torch.cuda.ipc_collect() raises on a CPU-only torch.",
    "a no-op: no CUDA IPC memory exists to collect.",
    f"{_TORCH} torch/cuda/__init__.py (ipc_collect)",
)
STREAM_CAPTURING = _doc(
    "torch.cuda.is_current_stream_capturing() raises on a CPU-only torch.",
    "False: no CUDA graph is ever captured here.",
    f"{_TORCH} torch/cuda/graphs.py (is_current_stream_capturing)",
)
MEMORY_STATS = _doc(
    "CUDA code resets the allocator's counters before measuring; on a CPU build the statistics are 0 but the "
    "resets raise.",
    "a no-op: counters that are 0 stay 0; the statistics stay torch's own, never an invented number.",
    f"{_TORCH} torch/cuda/memory.py (reset_peak_memory_stats, reset_accumulated_memory_stats)",
    "callers measure through torch.accelerator.memory",
)
STREAMS = _doc(
    "CUDA code orders work across streams (current_stream().wait_stream(s), `with torch.cuda.stream(s)`, "
    "set_stream); " + _RAISES + ".",
    "the CPU's one ordered queue, a stand-in stream (cpu/cuda_stand_ins.Stream) whose waits are no-ops; "
    "torch.cuda.stream gives a re-enterable context that changes nothing.",
    f"{_TORCH} torch/cuda/__init__.py (current_stream, default_stream, set_stream, stream)",
)
STREAM_NEW = _doc(
    "torch.cuda.Stream() to overlap copies with compute raises 'torch.cuda.Stream requires CUDA support' (on a "
    "CUDA build without a usable GPU, 'no CUDA-capable device is detected').",
    "a stand-in stream (not an instance of torch.cuda.Stream: that class cannot make one without a device).",
    f"{_TORCH} torch/cuda/streams.py (Stream)",
)
EVENT_NEW = _doc(
    "torch.cuda.Event(enable_timing=True) to time and order work: 'Tried to instantiate dummy base class Event'.",
    "a stand-in event, complete when recorded; elapsed_time is the host time between two records.",
    f"{_TORCH} torch/cuda/streams.py (Event)",
)
RNG = _doc(
    "torch.cuda.manual_seed and set_rng_state on a CPU-only torch queue their work for a CUDA init that never "
    "comes (silently nothing); get_rng_state raises.",
    "the 'CUDA' RNG is the CPU default generator, which every op here draws from: the same stand-ins the CPU "
    "pack's views use (cpu/cuda_stand_ins.py).",
    f"{_TORCH} torch/cuda/random.py",
)
NVTX = _doc(
    "torch.cuda.nvtx.range_push and friends raise 'NVTX functions not installed' on a CPU-only torch.",
    "no-ops: profiler annotations, with no GPU profiler to annotate for.",
    f"{_TORCH} torch/cuda/nvtx.py",
)
DEVICE_CONTEXT = _doc(
    "`with torch.device('cuda'):` and torch.set_default_device('cuda') make every factory inside allocate on "
    "CUDA; the first allocation raises.",
    "a CUDA device becomes the CPU before the context records it.",
    f"{_TORCH} torch/utils/_device.py (DeviceContext.__init__)",
)
PROCESS_GROUPS = _doc(
    "CUDA scripts and Megatron-LM's tests initialise with backend='nccl'; a CPU-only torch has no NCCL "
    "('Distributed package doesn't have NCCL built in').",
    "NCCL becomes gloo, which reduces CPU tensors ('cuda:nccl,cpu:gloo' becomes 'gloo'; NCCL pg_options and a "
    "CUDA device_id are dropped); every other argument as given.",
    f"{_TORCH} torch/distributed/distributed_c10d.py (init_process_group, new_group, new_subgroups, "
    "new_subgroups_by_enumeration)",
    "callers pick the backend with torch.distributed.get_default_backend_for_device",
)
DEVICE_MESH = _doc(
    "init_device_mesh('cuda', shape) builds NCCL groups on CUDA devices.",
    "'cuda' becomes 'cpu': gloo groups over the same ranks.",
    f"{_TORCH} torch/distributed/device_mesh.py (init_device_mesh)",
    "callers pass torch.accelerator device types",
)
DDP = _doc(
    "DistributedDataParallel(model, device_ids=[local_rank]) is refused for a model on the CPU.",
    "with every parameter on the CPU, device_ids and output_device are dropped: torch's CPU DDP, the same all-reduce.",
    f"{_TORCH} torch/nn/parallel/distributed.py (DistributedDataParallel.__init__)",
    "callers pass device_ids only on a GPU",
)
AUTOCAST = _doc(
    "torch.autocast('cuda', dtype=...) on a CPU-only torch disables itself with a warning: the region silently "
    "runs in fp32.",
    "'cuda' becomes 'cpu', with CUDA's default dtype float16 when none is given: CPU autocast's op list.",
    f"{_TORCH} torch/amp/autocast_mode.py (autocast.__init__)",
    "callers pass torch.accelerator device types",
)
GRAD_SCALER = _doc(
    "GradScaler('cuda') on a CPU-only torch disables itself with a warning: fp16 trains without loss scaling.",
    "'cuda' becomes 'cpu': torch's CPU grad scaler, the same scaling, inf checks and skipped steps.",
    f"{_TORCH} torch/amp/grad_scaler.py (GradScaler.__init__)",
    "callers pass torch.accelerator device types",
)
TE_SPECS_TO_LOCAL = _doc(
    "without TE, gpt_layer_specs binds TESpecProvider = None and its TE spec functions call it (use_te=True, "
    "use_transformer_engine=True): TypeError 'NoneType' object is not callable; the BERT TE spec raises "
    "ImportError.",
    "where neither TE nor the TE-compatible layers (pack te) are behind the module's TESpecProvider: megatron's "
    "local spec with the same options (layer norms as their own modules, other parameter names, no fp8); "
    "TE-only options raise by name; otherwise upstream runs.",
    "megatron-core 0.19.2 megatron/core/models/gpt/gpt_layer_specs.py, models/gpt/moe_module_specs.py, "
    "models/bert/bert_layer_specs.py; Megatron-LM issue #1049 (the TE spec fails without TE)",
    "upstream falls back to the local spec itself when TE is absent",
)

TORCH_ROOT_TARGETS: tuple[tuple[str, str, PatchDoc], ...] = (
    # devices in arguments: names of the module ``torch`` itself
    *((f"torch.{name}", f"{_T}.factory_{name}", FACTORIES) for name in FACTORY_NAMES),
    ("torch.Tensor.to", f"{_T}.tensor_to", TENSOR_TO),
    *(
        (f"torch.Tensor.{name}", f"{_T}.tensor_{name}", TENSOR_NEW)
        for name in ("new_empty", "new_full", "new_ones", "new_tensor", "new_zeros")
    ),
    ("torch.Tensor.pin_memory", f"{_T}.tensor_pin_memory", PIN_MEMORY),
    ("torch.Generator", f"{_T}.Generator", GENERATOR),
    ("torch.Tensor.record_stream", f"{_T}.tensor_record_stream", RECORD_STREAM),
)
"""The transfer's targets owned by the module ``torch`` itself: fl_patch applies them once ``torch``
has finished loading."""

TORCH_SUBMODULE_TARGETS: tuple[tuple[str, str, PatchDoc], ...] = (
    # torch.cuda: devices
    ("torch.cuda.device_count", f"{_T}.device_count", DEVICE_COUNT),
    ("torch.cuda.set_device", f"{_T}.set_device", DEVICE_SELECTION),
    ("torch.cuda.current_device", f"{_T}.current_device", DEVICE_SELECTION),
    ("torch.cuda.device", f"{_T}.Device", DEVICE_SELECTION),
    ("torch.cuda.get_device_name", f"{_T}.get_device_name", DEVICE_NAME),
    ("torch.cuda.synchronize", f"{_T}.synchronize", SYNCHRONIZE),
    ("torch.cuda.ipc_collect", f"{_T}.ipc_collect", IPC_COLLECT),
    ("torch.cuda.graphs.is_current_stream_capturing", f"{_T}.is_current_stream_capturing", STREAM_CAPTURING),
    ("torch.cuda.memory.reset_peak_memory_stats", f"{_T}.reset_memory_stats", MEMORY_STATS),
    ("torch.cuda.memory.reset_accumulated_memory_stats", f"{_T}.reset_memory_stats", MEMORY_STATS),
    # torch.cuda: streams and events
    ("torch.cuda.current_stream", f"{_T}.current_stream", STREAMS),
    ("torch.cuda.default_stream", f"{_T}.default_stream", STREAMS),
    ("torch.cuda.set_stream", f"{_T}.set_stream", STREAMS),
    ("torch.cuda.stream", f"{_T}.stream", STREAMS),
    ("torch.cuda.streams.Stream.__new__", f"{_T}.stream_new", STREAM_NEW),
    ("torch.cuda.streams.Event.__new__", f"{_T}.event_new", EVENT_NEW),
    # torch.cuda: the RNG is the CPU generator
    *((f"torch.cuda.random.{name}", f"{_S}.{name}", RNG) for name in RNG_NAMES),
    # torch.cuda.nvtx: profiler annotations
    ("torch.cuda.nvtx.range_push", f"{_S}.nvtx_range_push", NVTX),
    ("torch.cuda.nvtx.range_pop", f"{_S}.nvtx_range_pop", NVTX),
    ("torch.cuda.nvtx.mark", f"{_S}.nvtx_mark", NVTX),
    ("torch.cuda.nvtx.range", f"{_S}.nvtx_range", NVTX),
    # devices in contexts
    ("torch.utils._device.DeviceContext.__init__", f"{_T}.device_context_init", DEVICE_CONTEXT),
    # distributed
    ("torch.distributed.distributed_c10d.init_process_group", f"{_T}.init_process_group", PROCESS_GROUPS),
    ("torch.distributed.distributed_c10d.new_group", f"{_T}.new_group", PROCESS_GROUPS),
    ("torch.distributed.distributed_c10d.new_subgroups", f"{_T}.new_subgroups", PROCESS_GROUPS),
    (
        "torch.distributed.distributed_c10d.new_subgroups_by_enumeration",
        f"{_T}.new_subgroups_by_enumeration",
        PROCESS_GROUPS,
    ),
    ("torch.distributed.device_mesh.init_device_mesh", f"{_T}.init_device_mesh", DEVICE_MESH),
    ("torch.nn.parallel.distributed.DistributedDataParallel.__init__", f"{_T}.ddp_init", DDP),
    # mixed precision
    ("torch.amp.autocast_mode.autocast.__init__", f"{_T}.autocast_init", AUTOCAST),
    ("torch.amp.grad_scaler.GradScaler.__init__", f"{_T}.grad_scaler_init", GRAD_SCALER),
)
"""The transfer's targets in torch's submodules, each named where it is defined (so that fl_patch also
rebinds the names other modules bound to it: ``torch.cuda.manual_seed`` for
``torch.cuda.random.manual_seed``).

``torch.cuda`` finishes loading while ``torch`` itself is still initialising, when importing
the impls (which use ``torch.distributed``, ``torch.amp``) would re-enter torch's C-extension
set-up (measured: ``double free or corruption``). The engine never applies a target then: it
cannot choose a vendor while torch imports (``PlatformNotReady``), and retries the target
once torch has loaded."""

TORCH_TARGETS = (*TORCH_ROOT_TARGETS, *TORCH_SUBMODULE_TARGETS)
"""Every torch target of the transfer."""

_GPT = "megatron.core.models.gpt.gpt_layer_specs"
MEGATRON_TARGETS: tuple[tuple[str, str, PatchDoc], ...] = (
    (
        f"{_GPT}.get_gpt_layer_with_transformer_engine_submodules",
        f"{_M}.gpt_layer_with_transformer_engine_submodules",
        TE_SPECS_TO_LOCAL,
    ),
    (f"{_GPT}.get_mlp_module_spec", f"{_M}.gpt_mlp_module_spec", TE_SPECS_TO_LOCAL),
    (f"{_GPT}.get_gpt_decoder_layer_specs", f"{_M}.gpt_decoder_layer_specs", TE_SPECS_TO_LOCAL),
    (f"{_GPT}.get_gpt_mtp_block_spec", f"{_M}.gpt_mtp_block_spec", TE_SPECS_TO_LOCAL),
    ("megatron.core.models.gpt.moe_module_specs.get_moe_module_spec", f"{_M}.gpt_moe_module_spec", TE_SPECS_TO_LOCAL),
    (
        "megatron.core.models.bert.bert_layer_specs.get_bert_layer_with_transformer_engine_submodules",
        f"{_M}.bert_layer_with_transformer_engine_submodules",
        TE_SPECS_TO_LOCAL,
    ),
)
"""The transfer's megatron targets: Transformer Engine layer specs -> local specs when TE is absent."""


def transfer_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the transfer is on: unless ``FL_PATCH_CUDA_ON_CPU`` says off."""
    from fl_patch.config.settings import Settings

    return Settings.from_environ(environ).cuda_on_cpu


def register_pack() -> None:
    """The ``cuda_on_cpu`` pack (``fl_patch.impls.PACKS``): the transfer, unless it is switched off."""
    # -- Everything above, where the transfer is on (FL_PATCH_CUDA_ON_CPU=0 / --no-cuda-on-cpu turns it off).
    if CUDA_ON_CPU_ON:
        for target, impl, doc in (*TORCH_TARGETS, *MEGATRON_TARGETS):
            register(target=target, impl=impl, vendor=_CPU, doc=doc)
