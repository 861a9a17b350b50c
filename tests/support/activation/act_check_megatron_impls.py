"""Impls for ``act_check_megatron`` (the class lives in ``act_check_megatron_scheduler``).

Not here: a module holding impls for several targets must not import one of their
target modules at its top (the engine loads it for the first target, mid-import, and
then the class is not defined yet when the second target's module loads).
"""

from __future__ import annotations


def get_grad_norm(grads, norm_type=2):  # upstream: (grads_for_norm, norm_type=2, grad_stats_parallel_group=None)
    return 0.0


def divide(numerator, denominator):
    return numerator // denominator


def unscale_main_grads_and_check_for_nan(self):
    return False


def extract_common_per_param_step(state_dict):
    return None
