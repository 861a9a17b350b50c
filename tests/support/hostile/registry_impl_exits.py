"""Registers a real megatron-core target whose impl module calls sys.exit(0) at import."""

from fl_patch import register

register("megatron.core.optimizer.clip_grads.get_grad_norm_fp32", "hostile.exits_at_import.get_grad_norm_fp32")
