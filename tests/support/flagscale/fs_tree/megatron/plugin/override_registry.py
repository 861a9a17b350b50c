"""The tree's registrations, in FlagScale's form (the module imports nothing of fl_patch)."""

from megatron.plugin.decorators import register

register(
    target="megatron.core.optimizer.clip_grads.get_grad_norm_fp32",
    impl="megatron.plugin.optimizer.clip_grads.get_grad_norm_fp32",
)
register(
    target="megatron.core.dist_checkpointing.strategies.filesystem_async.FileSystemWriterAsync.prepare_write_data",
    impl="megatron.plugin.kunlunxin.filesystem_async.prepare_write_data",
    vendor="kunlunxin",
)
# FlagScale's key form for a staticmethod: module and function name, no class.
register(
    target="megatron.core.dist_checkpointing.strategies.filesystem_async.preload_tensors",
    impl="megatron.plugin.kunlunxin.filesystem_async.preload_tensors_kunlunxin",
    vendor="kunlunxin",
)
# Renamed upstream since (MTPLossLoggingHelper.reduce_metrics_in_tracker in 0.19).
register(
    target="megatron.core.transformer.multi_token_prediction.reduce_loss_in_tracker",
    impl="megatron.plugin.kunlunxin.filesystem_async.prepare_write_data",
    vendor="kunlunxin",
)
# Needs the vendor's torch extension, which this machine lacks.
register(
    target="megatron.core.tensor_parallel.random._set_cuda_rng_state",
    impl="megatron.plugin.ascend.random._set_cuda_rng_state",
    vendor="npu",
)
