"""Impls for real megatron-core 0.19.2 targets; each records that it ran in CALLS."""

from __future__ import annotations

import torch

# The seed's pattern: import the public name of the class being replaced and subclass it.
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

import fl_patch

CALLS: list[str] = []

GRAD_NORM = "megatron.core.optimizer.clip_grads.get_grad_norm_fp32"
UNSCALE = "megatron.core.optimizer.optimizer.MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan"


def get_grad_norm_fp32(grads_for_norm, norm_type=2, grad_stats_parallel_group=None):
    """A vendor's norm: local, no collective."""
    CALLS.append("get_grad_norm_fp32")
    if isinstance(grads_for_norm, torch.Tensor):
        grads_for_norm = [grads_for_norm]
    return float(torch.linalg.vector_norm(torch.stack([g.float().norm(norm_type) for g in grads_for_norm]), norm_type))


def divide(numerator, denominator):
    """Calls through to upstream ``megatron.core.utils.divide`` and marks the result."""
    CALLS.append("divide")
    return ("patched", fl_patch.original("megatron.core.utils.divide")(numerator, denominator))


def takes_anything(*args, **kwargs):
    """An impl whose signature takes every call (for tests whose subject is not the impl)."""
    CALLS.append("takes_anything")
    return ("patched", args, kwargs)


def unscale_main_grads_and_check_for_nan(self):
    CALLS.append("unscale")
    return fl_patch.original(UNSCALE)(self)


def extract_common_per_param_step(state_dict):
    CALLS.append("extract_common_per_param_step")
    return "patched-step"


def is_distopt_quantized_param(cls, tensor):
    CALLS.append(f"is_distopt_quantized_param:{cls.__name__}")
    return cls


def attention_mask_func(attention_scores, attention_mask):
    """Differs from upstream (masked_fill with -10000) so a test can tell who ran."""
    return attention_scores * 2.0 + 1.0


class WarmupStableDecayScheduler(OptimizerParamScheduler):
    """Subclass of the original, as FlagScale requires."""

    def __init__(self, *args, **kwargs):
        CALLS.append("WarmupStableDecayScheduler.__init__")
        super().__init__(*args, **kwargs)

    def get_lr(self, param_group):
        return 0.5 * super().get_lr(param_group)


class NotASubclass:
    def __init__(self, *args, **kwargs):
        pass


NOT_CALLABLE = 42
RNG_TRACKER_NAME = "cpu-rng"
CPU_DEVICE = torch.device("cpu")
