"""Plugin implementations of megatron.core.optimizer.clip_grads.get_grad_norm_fp32.

``get_grad_norm_fp32`` accepts a list of grad-stats process groups: the p-th power
of the local norm is summed over each group in turn (for the max norm, the max is
taken over each). With one group it computes exactly what upstream computes, with
the same kernels, so the result is the same to the bit; the reduction runs on the
device the gradients live on (CPU communication works too).
"""

import math

import torch
from megatron.core.optimizer.clip_grads import l2_norm_impl, multi_tensor_applier
from megatron.core.utils import get_data_parallel_group_if_dtensor, to_local_if_dtensor


def _as_groups(grad_stats_parallel_group):
    if isinstance(grad_stats_parallel_group, list):
        return grad_stats_parallel_group
    return [grad_stats_parallel_group]


def get_grad_norm_fp32(grads_for_norm, norm_type=2, grad_stats_parallel_group=None):
    """p-norm of the gradients in fp32, reduced over one group or a list of groups."""
    if isinstance(grads_for_norm, torch.Tensor):
        grads_for_norm = [grads_for_norm]

    data_parallel_group = None
    for grad in grads_for_norm:
        data_parallel_group = get_data_parallel_group_if_dtensor(grad, data_parallel_group)
    grads_for_norm = [to_local_if_dtensor(grad) for grad in grads_for_norm]
    device = grads_for_norm[0].device if grads_for_norm else torch.device("cpu")
    groups = _as_groups(grad_stats_parallel_group)

    norm_type = float(norm_type)
    if norm_type == math.inf:
        total_norm = max((grad.abs().max() for grad in grads_for_norm), default=torch.tensor(0.0))
        total = torch.tensor([float(total_norm)], dtype=torch.float, device=device)
        if data_parallel_group:
            torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.MAX, group=data_parallel_group)
        for group in groups:
            torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.MAX, group=group)
        return total[0].item()

    total = torch.zeros(1, dtype=torch.float, device=device)
    if not grads_for_norm:
        pass
    elif norm_type == 2.0:
        overflow = torch.zeros(1, dtype=torch.int, device=device)
        grad_norm, _ = multi_tensor_applier(l2_norm_impl, overflow, [grads_for_norm], False)
        total = grad_norm**norm_type
    else:
        for grad in grads_for_norm:
            total += torch.norm(grad, norm_type) ** norm_type
    if data_parallel_group:
        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM, group=data_parallel_group)
    for group in groups:
        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM, group=group)
    return total.item() ** (1.0 / norm_type)


# The vendor's variant: MUSA devices keep the norm in fp64 across the reduction.
MUSA_CALLS = []


def get_grad_norm_fp32_musa(grads_for_norm, norm_type=2, grad_stats_parallel_group=None):
    """The same norm, accumulated in float64 (as a MUSA port might do); records that it ran."""
    MUSA_CALLS.append(len(grads_for_norm) if isinstance(grads_for_norm, list) else 1)
    if isinstance(grads_for_norm, torch.Tensor):
        grads_for_norm = [grads_for_norm]
    grads_for_norm = [to_local_if_dtensor(grad) for grad in grads_for_norm]
    device = grads_for_norm[0].device if grads_for_norm else torch.device("cpu")
    norm_type = float(norm_type)
    total = torch.zeros(1, dtype=torch.float64, device=device)
    for grad in grads_for_norm:
        total += torch.linalg.vector_norm(grad.double(), norm_type) ** norm_type
    for group in _as_groups(grad_stats_parallel_group):
        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM, group=group)
    return total.item() ** (1.0 / norm_type)
