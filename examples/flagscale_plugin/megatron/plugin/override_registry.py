"""FlagScale override registry, unchanged: what replaces what in megatron.

Exactly the file a vendor keeps in a FlagScale tree. With fl_patch, upstream
megatron-core needs no ``@overridable`` edits: fl_patch serves
``megatron.plugin.decorators`` and applies these when each target module loads.
"""

from megatron.plugin.decorators import register

# 1. Replacing a class method.
register(
    target="megatron.core.optimizer.optimizer.MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan",
    impl="megatron.plugin.optimizer.optimizer._unscale_main_grads_and_check_for_nan",
)

# Needed since megatron-core 0.18: has_grad_norm_group() also reduces over the
# grad-stats group, so a list of groups must be handled there too.
register(
    target="megatron.core.optimizer.optimizer.MegatronOptimizer.has_grad_norm_group",
    impl="megatron.plugin.optimizer.optimizer.has_grad_norm_group",
)

# 2. Replacing a module-level function, with a second implementation for one vendor.
register(
    target="megatron.core.optimizer.clip_grads.get_grad_norm_fp32",
    impl="megatron.plugin.optimizer.clip_grads.get_grad_norm_fp32",
)
register(
    target="megatron.core.optimizer.clip_grads.get_grad_norm_fp32",
    impl="megatron.plugin.optimizer.clip_grads.get_grad_norm_fp32_musa",
    vendor="musa",
)

# 3. Replacing an entire class.
register(
    target="megatron.core.optimizer_param_scheduler.OptimizerParamScheduler",
    impl="megatron.plugin.optimizer_param_scheduler.WSDScheduler",
)
