"""Plugin implementation of MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan.

Supports a list of grad-stats process groups (heterogeneous setups reduce the
found-inf flag over several groups) and communicates on whatever device the flag
lives on.
"""

import torch


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
