"""The tree's grad norm: counts its calls, computes through the original (``Target.__wrapped__``)."""

CALLS: list[str] = []


def get_grad_norm_fp32(grads_for_norm, norm_type=2, grad_stats_parallel_group=None):
    from megatron.core.optimizer import clip_grads

    CALLS.append("get_grad_norm_fp32")
    return clip_grads.get_grad_norm_fp32.__wrapped__(grads_for_norm, norm_type, grad_stats_parallel_group)
