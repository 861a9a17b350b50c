"""An impl that does ``import megatron.core.optimizer.clip_grads`` and reads the upstream by its dotted path.

Vendors write this to call through to upstream. It is imported while
``megatron.core.optimizer.clip_grads`` has just run its body, before the import
system binds the submodule on its parent package.
"""

import megatron.core.optimizer.clip_grads

UPSTREAM = megatron.core.optimizer.clip_grads.get_grad_norm_fp32


def get_grad_norm_fp32(
    grads_for_norm: object, norm_type: float = 2, grad_stats_parallel_group: object = None
) -> object:
    return UPSTREAM(grads_for_norm, norm_type, grad_stats_parallel_group)
