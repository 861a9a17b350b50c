from fl_patch import register

register("megatron.core.optimizer.clip_grads.get_grad_norm_fp32", "fltest_lazy.impls.get_grad_norm_fp32")
register("megatron.core.post_training.modelopt.layers.Linear", "fltest_lazy.never.Linear")
register("megatron.core.transformer.moe.ops.paged_stash", "fl_patch.impls.cpu.paged_stash_ops")
