"""Registers a megatron-core target whose impl reads its upstream by dotted module access."""

from fl_patch import register

register("megatron.core.optimizer.clip_grads.get_grad_norm_fp32", "hostile.submodule_access.get_grad_norm_fp32")
