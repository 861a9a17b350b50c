"""Every patch of the CPU pack (vendor ``cpu``). Only strings: nothing imports until needed."""

from fl_patch import register

CPU = "cpu"
VIEW = "fl_patch.impls.cpu.torch_view.CPU_TORCH"

register(
    target="megatron.core.transformer.moe.ops.paged_stash",
    impl="fl_patch.impls.cpu.paged_stash_ops",
    vendor=CPU,
)

for module in (
    "tensor_parallel.random",
    "utils",
    "transformer.utils",
    "pipeline_parallel.schedules",
    "distributed.param_and_grad_buffer",
    "distributed.distributed_data_parallel",
    "models.common.embeddings.rotary_pos_embedding",
    "optimizer.optimizer",
    "optimizer.distrib_optimizer",
    "optimizer.clip_grads",
    "optimizer.grad_scaler",
    "dist_checkpointing.strategies.filesystem_async",
    "dist_checkpointing.strategies.state_dict_saver",
):
    register(target=f"megatron.core.{module}.torch", impl=VIEW, vendor=CPU)

register("megatron.core.tensor_parallel.random._get_cuda_rng_state", "fl_patch.impls.cpu.rng.get_cuda_rng_state", CPU)
register("megatron.core.tensor_parallel.random._set_cuda_rng_state", "fl_patch.impls.cpu.rng.set_cuda_rng_state", CPU)
register("megatron.core.tensor_parallel.random.CudaRNGStatesTracker.fork", "fl_patch.impls.cpu.rng.fork", CPU)
register(
    "megatron.core.fusions.fused_softmax.FusedScaleMaskSoftmax.is_kernel_available",
    "fl_patch.impls.cpu.fusions.fused_softmax_kernel_available",
    CPU,
)
register(
    "megatron.core.optimizer.clip_grads.clip_grad_by_total_norm_fp32",
    "fl_patch.impls.cpu.optimizer.clip_grad_by_total_norm_fp32",
    CPU,
)
register(
    "megatron.core.optimizer.optimizer.Float16OptimizerWithFloat16Params.__init__",
    "fl_patch.impls.cpu.optimizer.float16_optimizer_init",
    CPU,
)
register(
    "megatron.core.optimizer.distrib_optimizer.DistributedOptimizer.__init__",
    "fl_patch.impls.cpu.optimizer.distributed_optimizer_init",
    CPU,
)
register(
    "megatron.core.optimizer.grad_scaler.DynamicGradScaler.load_state_dict",
    "fl_patch.impls.cpu.optimizer.dynamic_grad_scaler_load_state_dict",
    CPU,
)
