"""Registrations on real megatron-core 0.19.2 for ``--check`` (used with FL_PATCH_PACKS=none)."""

from fl_patch import register

IMPLS = "act_check_megatron_impls"

register("megatron.core.transformer.moe.ops.paged_stash", "fl_patch.impls.cpu.paged_stash_ops")
register("megatron.core.optimizer.clip_grads.get_grad_norm_fp64", f"{IMPLS}.get_grad_norm")  # not in 0.19.2
register("megatron.core.optimizer.clip_grads.get_grad_norm_fp32", f"{IMPLS}.get_grad_norm")  # wrong signature
register("megatron.core.utils.divide", f"{IMPLS}.divide")
register(
    "megatron.core.optimizer.optimizer.MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan",
    f"{IMPLS}.unscale_main_grads_and_check_for_nan",
)
register(
    "megatron.core.optimizer.optimizer.MegatronOptimizer._extract_common_per_param_step",
    f"{IMPLS}.extract_common_per_param_step",
)
register("megatron.core.optimizer_param_scheduler.OptimizerParamScheduler", "act_check_megatron_scheduler.Scheduler")
