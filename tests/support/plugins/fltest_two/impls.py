"""The two impls: a replacement and a wrapper."""

from __future__ import annotations

from typing import Any

import fl_patch


def divide(numerator: int, denominator: int) -> int:
    if denominator == 0 or numerator % denominator:
        raise ValueError(f"{numerator} is not divisible by {denominator}")
    return numerator // denominator


def get_grad_norm_fp32(grads_for_norm: Any, norm_type: float = 2, grad_stats_parallel_group: Any = None) -> float:
    upstream = fl_patch.original("megatron.core.optimizer.clip_grads.get_grad_norm_fp32")
    return upstream(grads_for_norm, norm_type, grad_stats_parallel_group)
