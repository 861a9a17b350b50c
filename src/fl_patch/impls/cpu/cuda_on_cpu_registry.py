"""The CUDA-on-CPU transfer (the pack ``cuda_on_cpu``), and megatron-core without its optional CUDA libraries.

Vendor ``cpu`` (chosen where no accelerator is found, or with ``MG_FL_PREFER=cpu``), so
these registrations apply only on a machine without a GPU. Like every pack registry it
calls ``register()`` with strings only and imports neither torch nor megatron.

Two groups:

- :func:`register_without_extensions` (called by the CPU pack's ``registry.py``): megatron-core problems
  that only show where flash-attn / Transformer Engine are absent, or with the wheel
  (``compile_helpers``; ``cuda_on_cpu_megatron.py``).
- :func:`register_cuda_on_cpu` (the ``cuda_on_cpu`` pack, :func:`register_pack`, when :func:`transfer_enabled`): ``torch.cuda.*``,
  devices in torch's factories and ``Tensor.to``, NCCL, autocast and the grad scaler for
  code around megatron (``cuda_on_cpu.py``, the shared stand-ins in ``cuda_stand_ins.py``),
  and the Transformer Engine layer specs, which become megatron-core's local specs.

The switch (``docs/cuda_on_cpu.md``): the transfer is on by default; ``FL_PATCH_CUDA_ON_CPU=0``
(``--no-cuda-on-cpu``) turns it off, and so does a ``FL_PATCH_PACKS`` list without
``cuda_on_cpu`` (``--packs cpu``: the CPU pack's megatron patches alone).
"""

from __future__ import annotations

from collections.abc import Mapping

from fl_patch import register

__all__ = [
    "FACTORY_NAMES",
    "MEGATRON_TARGETS",
    "RNG_NAMES",
    "SWITCH",
    "TORCH_ROOT_TARGETS",
    "TORCH_SUBMODULE_TARGETS",
    "TORCH_TARGETS",
    "WITHOUT_EXTENSIONS_TARGETS",
    "register_cuda_on_cpu",
    "register_pack",
    "register_without_extensions",
    "transfer_enabled",
]

SWITCH = "FL_PATCH_CUDA_ON_CPU"
"""The environment variable that turns the transfer off (``0``/``false``/``no``/``off``)."""

_CPU = "cpu"
_T = "fl_patch.impls.cpu.cuda_on_cpu"
_S = "fl_patch.impls.cpu.cuda_stand_ins"
_M = "fl_patch.impls.cpu.cuda_on_cpu_megatron"

FACTORY_NAMES: tuple[str, ...] = (
    "arange",
    "as_tensor",
    "asarray",
    "empty",
    "empty_like",
    "empty_strided",
    "eye",
    "full",
    "full_like",
    "linspace",
    "logspace",
    "ones",
    "ones_like",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "randperm",
    "scalar_tensor",
    "tensor",
    "tril_indices",
    "triu_indices",
    "zeros",
    "zeros_like",
)
"""Tensor factories of ``torch`` that take a ``device`` keyword; here, so that registering imports no torch
(``cuda_on_cpu`` and the CPU views of ``torch_view`` use this list too)."""

RNG_NAMES: tuple[str, ...] = (
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
)

TORCH_ROOT_TARGETS: tuple[tuple[str, str], ...] = (
    # devices in arguments: names of the module ``torch`` itself
    *((f"torch.{name}", f"{_T}.factory_{name}") for name in FACTORY_NAMES),
    ("torch.Tensor.to", f"{_T}.tensor_to"),
    *(
        (f"torch.Tensor.{name}", f"{_T}.tensor_{name}")
        for name in ("new_empty", "new_full", "new_ones", "new_tensor", "new_zeros")
    ),
    ("torch.Tensor.pin_memory", f"{_T}.tensor_pin_memory"),
    ("torch.Generator", f"{_T}.Generator"),
    ("torch.Tensor.record_stream", f"{_T}.tensor_record_stream"),
)
"""The transfer's targets owned by the module ``torch`` itself: fl_patch applies them once ``torch``
has finished loading."""

TORCH_SUBMODULE_TARGETS: tuple[tuple[str, str], ...] = (
    # torch.cuda: devices
    ("torch.cuda.device_count", f"{_T}.device_count"),
    ("torch.cuda.set_device", f"{_T}.set_device"),
    ("torch.cuda.current_device", f"{_T}.current_device"),
    ("torch.cuda.device", f"{_T}.Device"),
    ("torch.cuda.get_device_name", f"{_T}.get_device_name"),
    ("torch.cuda.synchronize", f"{_T}.synchronize"),
    ("torch.cuda.ipc_collect", f"{_T}.ipc_collect"),
    ("torch.cuda.graphs.is_current_stream_capturing", f"{_T}.is_current_stream_capturing"),
    ("torch.cuda.memory.reset_peak_memory_stats", f"{_T}.reset_memory_stats"),
    ("torch.cuda.memory.reset_accumulated_memory_stats", f"{_T}.reset_memory_stats"),
    # torch.cuda: streams and events
    ("torch.cuda.current_stream", f"{_T}.current_stream"),
    ("torch.cuda.default_stream", f"{_T}.default_stream"),
    ("torch.cuda.set_stream", f"{_T}.set_stream"),
    ("torch.cuda.stream", f"{_T}.stream"),
    ("torch.cuda.streams.Stream.__new__", f"{_T}.stream_new"),
    ("torch.cuda.streams.Event.__new__", f"{_T}.event_new"),
    # torch.cuda: the RNG is the CPU generator
    *((f"torch.cuda.random.{name}", f"{_S}.{name}") for name in RNG_NAMES),
    # torch.cuda.nvtx: profiler annotations
    ("torch.cuda.nvtx.range_push", f"{_S}.nvtx_range_push"),
    ("torch.cuda.nvtx.range_pop", f"{_S}.nvtx_range_pop"),
    ("torch.cuda.nvtx.mark", f"{_S}.nvtx_mark"),
    ("torch.cuda.nvtx.range", f"{_S}.nvtx_range"),
    # devices in contexts
    ("torch.utils._device.DeviceContext.__init__", f"{_T}.device_context_init"),
    # distributed
    ("torch.distributed.distributed_c10d.init_process_group", f"{_T}.init_process_group"),
    ("torch.distributed.distributed_c10d.new_group", f"{_T}.new_group"),
    ("torch.distributed.distributed_c10d.new_subgroups", f"{_T}.new_subgroups"),
    ("torch.distributed.distributed_c10d.new_subgroups_by_enumeration", f"{_T}.new_subgroups_by_enumeration"),
    ("torch.distributed.device_mesh.init_device_mesh", f"{_T}.init_device_mesh"),
    ("torch.nn.parallel.distributed.DistributedDataParallel.__init__", f"{_T}.ddp_init"),
    # mixed precision
    ("torch.amp.autocast_mode.autocast.__init__", f"{_T}.autocast_init"),
    ("torch.amp.grad_scaler.GradScaler.__init__", f"{_T}.grad_scaler_init"),
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
MEGATRON_TARGETS: tuple[tuple[str, str], ...] = (
    (f"{_GPT}.get_gpt_layer_with_transformer_engine_submodules", f"{_M}.gpt_layer_with_transformer_engine_submodules"),
    (f"{_GPT}.get_mlp_module_spec", f"{_M}.gpt_mlp_module_spec"),
    (f"{_GPT}.get_gpt_decoder_layer_specs", f"{_M}.gpt_decoder_layer_specs"),
    (f"{_GPT}.get_gpt_mtp_block_spec", f"{_M}.gpt_mtp_block_spec"),
    ("megatron.core.models.gpt.moe_module_specs.get_moe_module_spec", f"{_M}.gpt_moe_module_spec"),
    (
        "megatron.core.models.bert.bert_layer_specs.get_bert_layer_with_transformer_engine_submodules",
        f"{_M}.bert_layer_with_transformer_engine_submodules",
    ),
)
"""The transfer's megatron targets: Transformer Engine layer specs -> local specs when TE is absent."""

WITHOUT_EXTENSIONS_TARGETS: tuple[tuple[str, str], ...] = (
    ("megatron.core.utils.get_fa_version", f"{_M}.get_fa_version"),
    ("megatron.core.tensor_parallel.random.CheckpointWithoutOutput.__init__", f"{_M}.checkpoint_without_output_init"),
    ("megatron.core.datasets.utils.compile_helpers", f"{_M}.compile_helpers"),
)
"""Always with the CPU pack: upstream problems that show only without flash-attn / Transformer Engine,
or with the megatron-core wheel (no Makefile for the dataset helpers it already ships built)."""


def transfer_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the transfer is on: unless ``FL_PATCH_CUDA_ON_CPU`` says off."""
    from fl_patch.config.settings import Settings

    return Settings.from_environ(environ).cuda_on_cpu


def register_without_extensions() -> None:
    """Register the fixes for megatron-core without flash-attn / Transformer Engine."""
    for target, impl in WITHOUT_EXTENSIONS_TARGETS:
        register(target=target, impl=impl, vendor=_CPU)


def register_cuda_on_cpu() -> None:
    """Register the transfer (torch-level and the TE layer specs)."""
    for target, impl in (*TORCH_TARGETS, *MEGATRON_TARGETS):
        register(target=target, impl=impl, vendor=_CPU)


def register_pack() -> None:
    """The ``cuda_on_cpu`` pack (``fl_patch.impls.PACKS``): the transfer, unless it is switched off."""
    if transfer_enabled():
        register_cuda_on_cpu()
