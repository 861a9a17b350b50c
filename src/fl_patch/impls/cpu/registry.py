"""Every patch of the CPU pack (vendor ``cpu``): upstream megatron-core trains on a machine with no GPU.

The engine imports this module as the pack (``fl_patch.impls.PACKS``). It only calls
``register()`` with strings: nothing is imported until a target's module loads, and on a
machine where another vendor is chosen (a GPU) none of it applies. The ``cpu`` vendor
is chosen where no accelerator is detected, or with ``MG_FL_PREFER=cpu``.

Verified on megatron-core 0.19.2 (``_compat.VERIFIED_MEGATRON_CORE``); on another
release the pack still applies and says so once (``FlPatchWarning``), when it is first
used. Each impl's docstring gives Why (the upstream line that assumes CUDA), How, the
upstream reference and when it can be dropped.

``apply_rope_fusion`` and ``gradient_accumulation_fusion`` get host implementations (``rope.py``,
``wgrad_accumulation.py``). Left to configuration, not patched (see ``examples/train_gpt.py``): fusions
that need Transformer Engine or a CUDA kernel (multi-latent attention's fused RoPE) and those compiled by ``torch.compile``
(``bias_activation_fusion``, ``bias_dropout_fusion``...): upstream's defaults leave them off.
"""

import importlib.util

from fl_patch import register

from ._compat import VERIFIED_MEGATRON_CORE

__all__ = ["CPU", "VERIFIED_MEGATRON_CORE"]

CPU = "cpu"
_PACK = "fl_patch.impls.cpu"

# -- Importing megatron.core at all: upstream's module does `import triton` unconditionally.
#    (0.19 moved the kernels here from moe/paged_stash.py. Any release's unguarded triton import
#    is also covered by fl_patch's GPU-only stand-in, hooks/gpu_only.py; this replacement keeps the
#    explicit kernels' message and exports.)
register(
    target="megatron.core.transformer.moe.ops.paged_stash",
    impl=f"{_PACK}.paged_stash_ops",
    vendor=CPU,
    requires="megatron-core>=0.19",
)

# -- The name `torch` in modules that allocate on, or synchronise with, the GPU: a CPU view
#    of torch (torch_view.py), one documented object per module (torch_names.py).
for module, view in (
    ("tensor_parallel.random", "TENSOR_PARALLEL_RANDOM"),
    ("tensor_parallel.layers", "TENSOR_PARALLEL_LAYERS"),
    ("utils", "UTILS"),
    ("transformer.utils", "TRANSFORMER_UTILS"),
    ("pipeline_parallel.schedules", "SCHEDULES"),
    ("distributed.param_and_grad_buffer", "PARAM_AND_GRAD_BUFFER"),
    ("models.common.embeddings.rotary_pos_embedding", "ROTARY_POS_EMBEDDING"),
    ("models.common.embeddings.yarn_rotary_pos_embedding", "YARN_ROTARY_POS_EMBEDDING"),
    ("optimizer", "OPTIMIZER_PACKAGE"),
    ("optimizer.optimizer", "OPTIMIZER"),
    ("optimizer.distrib_optimizer", "DISTRIB_OPTIMIZER"),
    ("optimizer.clip_grads", "CLIP_GRADS"),
    ("optimizer.grad_scaler", "GRAD_SCALER"),
    ("dist_checkpointing.strategies.filesystem_async", "FILESYSTEM_ASYNC"),
    ("dist_checkpointing.strategies.state_dict_saver", "STATE_DICT_SAVER"),
):
    register(target=f"megatron.core.{module}.torch", impl=f"{_PACK}.torch_names.{view}", vendor=CPU)

# -- The RNG tracker: setting the "CUDA" RNG state must really set the CPU generator's.
register(
    target="megatron.core.tensor_parallel.random._set_cuda_rng_state",
    impl=f"{_PACK}.rng.set_cuda_rng_state",
    vendor=CPU,
)
register(
    target="megatron.core.tensor_parallel.random.CudaRNGStatesTracker.fork",
    impl=f"{_PACK}.rng.fork",
    vendor=CPU,
)

# -- Optimizers that recognise tensors by their CUDA type name, or move state with .cuda().
register(
    target="megatron.core.optimizer.optimizer.Float16OptimizerWithFloat16Params.__init__",
    impl=f"{_PACK}.optimizer.float16_optimizer_init",
    vendor=CPU,
)
register(
    target="megatron.core.optimizer.distrib_optimizer.DistributedOptimizer.__init__",
    impl=f"{_PACK}.optimizer.distributed_optimizer_init",
    vendor=CPU,
)
register(
    target="megatron.core.optimizer.clip_grads.clip_grad_by_total_norm_fp32",
    impl=f"{_PACK}.optimizer.clip_grad_by_total_norm_fp32",
    vendor=CPU,
)
register(
    target="megatron.core.optimizer.grad_scaler.DynamicGradScaler.load_state_dict",
    impl=f"{_PACK}.optimizer.dynamic_grad_scaler_load_state_dict",
    vendor=CPU,
)

# -- torch's optimizers where megatron expects TE's/Apex's: OptimizerConfig.lr=None (the default,
#    the scheduler sets it) must be accepted (torch_optimizers.py; Adam/AdamW via the view above).
register(
    target="megatron.core.optimizer.SGD",
    impl=f"{_PACK}.torch_optimizers.SGD",
    vendor=CPU,
)

# -- Distributed-optimizer checkpoints with torch's Adam (no Apex/TE: always so on a CPU).
register(
    target="megatron.core.optimizer.distrib_optimizer.DistributedOptimizer.state_dict",
    impl=f"{_PACK}.optimizer.distributed_optimizer_state_dict",
    vendor=CPU,
)
register(
    target="megatron.core.optimizer.distrib_optimizer.DistributedOptimizer.load_state_dict",
    impl=f"{_PACK}.optimizer.distributed_optimizer_load_state_dict",
    vendor=CPU,
)
register(
    target="megatron.core.optimizer.distrib_optimizer.DistributedOptimizer._set_main_param_and_optimizer_states",
    impl=f"{_PACK}.optimizer.distributed_optimizer_set_states",
    vendor=CPU,
)

# -- --optimizer-cpu-offload: HybridDeviceOptimizer splits parameters by is_cuda; with every parameter
#    on the host it steps a host parameter as if it were an offloaded copy and fails (KeyError).
register(
    target="megatron.core.optimizer.cpu_offloading.hybrid_optimizer.HybridDeviceOptimizer._get_sub_optimizer_param_groups",
    impl=f"{_PACK}.optimizer.hybrid_optimizer_param_groups",
    vendor=CPU,
)

# -- A fused CUDA kernel chosen from shapes alone (masked_softmax_fusion=True with fp16/bf16).
register(
    target="megatron.core.fusions.fused_softmax.FusedScaleMaskSoftmax.is_kernel_available",
    impl=f"{_PACK}.fusions.fused_softmax_kernel_available",
    vendor=CPU,
)
# -- MoE's indices -> multihot converter: a Triton kernel, and upstream's no-Triton fallback cannot run.
register(
    target="megatron.core.fusions.fused_indices_converter.fused_indices_to_multihot",
    impl=f"{_PACK}.fusions.fused_indices_to_multihot",
    vendor=CPU,
)

# -- apply_rope_fusion=True: the fused RoPE functions megatron looks up, on the host. Upstream
#    binds them to None without TE: create=True installs them over the None.
for name in ("fused_apply_rotary_pos_emb", "fused_apply_rotary_pos_emb_thd"):
    register(
        target=f"megatron.core.models.common.embeddings.rope_utils.{name}",
        impl=f"{_PACK}.rope.{name}",
        vendor=CPU,
        create=True,
    )

# -- gradient_accumulation_fusion=True without Apex's CUDA extension: the weight gradient added into
#    main_grad by one GEMM (wgrad_accumulation.py; here the host's addmm_). The extension's name is
#    absent from layers.py without Apex: create=True installs it.
if importlib.util.find_spec("fused_weight_gradient_mlp_cuda") is None:
    register(
        target="megatron.core.tensor_parallel.layers._grad_accum_fusion_available",
        impl=f"{_PACK}.wgrad_accumulation.AVAILABLE",
        vendor=CPU,
    )
    register(
        target="megatron.core.tensor_parallel.layers.fused_weight_gradient_mlp_cuda",
        impl=f"{_PACK}.wgrad_accumulation",
        vendor=CPU,
        create=True,
    )

# -- Which Transformer Engine is installed: one answer (te_version.py) for megatron's helpers.
register(target="megatron.core.utils.get_te_version", impl=f"{_PACK}.te_version.core_get_te_version", vendor=CPU)
register(
    target="megatron.core.distributed.fsdp.src.megatron_fsdp.utils.get_te_version",
    impl=f"{_PACK}.te_version.fsdp_get_te_version",
    vendor=CPU,
)

# -- Groups megatron drops at destroy_model_parallel: gloo groups keep threads and sockets
#    until destroyed; without this each init/destroy cycle leaks ~20 of them (issue 27).
register(
    target="megatron.core.parallel_state.destroy_model_parallel",
    impl=f"{_PACK}.process_groups.destroy_model_parallel",
    vendor=CPU,
)
# -- NCCL process-group options (high-priority streams, CTA counts) built where torch has no NCCL.
register(
    target="megatron.core.parallel_state.get_nccl_options",
    impl=f"{_PACK}.process_groups.get_nccl_options",
    vendor=CPU,
)

# -- megatron.training (Megatron-LM's pretrain_gpt.py) and what a training script hits outside
#    megatron: training_registry.py. A function call, not an import, so that it registers
#    again whenever this module runs again.
from .training_registry import register_training  # noqa: E402

register_training()

# -- megatron-core without flash-attn / Transformer Engine (always). The CUDA-on-CPU transfer
#    for the code around megatron is the pack cuda_on_cpu (cuda_on_cpu_registry.py,
#    docs/cuda_on_cpu.md).
from .cuda_on_cpu_registry import register_without_extensions  # noqa: E402

register_without_extensions()

# -- MoE with expert parallelism over gloo: the alltoall dispatcher's split sizes as numpy (moe.py).
register(
    target="megatron.core.transformer.moe.moe_utils.maybe_move_tensor_to_cpu",
    impl=f"{_PACK}.moe.maybe_move_tensor_to_cpu",
    vendor=CPU,
)

# -- megatron-core's Transformer Engine layer spec where TE is absent: TE's module tree and
#    parameter names in plain torch (te_registry.py, te_modules.py, docs/te_spec.md).
from .te_registry import register_te_spec  # noqa: E402

register_te_spec()
