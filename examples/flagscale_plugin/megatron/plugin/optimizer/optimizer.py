"""Plugin implementation of MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan.

Supports a list of grad-stats process groups (heterogeneous setups reduce the
found-inf flag over several groups) and communicates on whatever device the flag
lives on.
"""

import torch
from megatron.core.optimizer.optimizer import (
    _get_param_grad_norm_group,
    _is_separate_grad_norm_group,
    _validate_grad_norm_group,
)


def _unscale_main_grads_and_check_for_nan(self):
    """Unscale the main grads; reduce the found-inf flag over every grad-stats group."""
    if not self.is_stub_optimizer:
        main_grads = self._collect_main_grad_data_for_unscaling()

    self.found_inf.fill_(0.0)

    if not self.is_stub_optimizer:
        torch._amp_foreach_non_finite_check_and_unscale_(main_grads, self.found_inf, self.grad_scaler.inv_scale)

    # Custom: the grad-stats group may be a list of groups.
    groups = self.get_grad_stats_parallel_group()
    if not isinstance(groups, list):
        groups = [groups]
    for group in groups:
        torch.distributed.all_reduce(self.found_inf, op=torch.distributed.ReduceOp.MAX, group=group)

    return self.found_inf.item() > 0


def has_grad_norm_group(self, grad_norm_group):
    """Whether any rank in the grad-stats group(s) owns params of ``grad_norm_group`` (cached)."""
    _validate_grad_norm_group(grad_norm_group)
    cache = self.__dict__.setdefault("_has_grad_norm_group_cache", {})
    if grad_norm_group not in cache:
        local = any(
            _is_separate_grad_norm_group(_get_param_grad_norm_group(param))
            and _get_param_grad_norm_group(param) == grad_norm_group
            for param in self.get_parameters()
        )
        # On the parameters' device: found_inf exists only with a grad scaler (not in fp32, nor
        # in bf16 without loss scaling), and upstream's hard-coded "cuda" is wrong off NVIDIA.
        device = next(iter(self.get_parameters()), torch.empty(0)).device
        flag = torch.tensor([1 if local else 0], dtype=torch.int, device=device)
        groups = self.get_grad_stats_parallel_group()
        if not isinstance(groups, list):
            groups = [groups]
        for group in groups:
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=group)
        cache[grad_norm_group] = bool(flag.item() > 0)
    return cache[grad_norm_group]
