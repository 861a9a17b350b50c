"""Wrap pattern: the upstream function, timed.

``fl_patch.original(target)`` is the upstream object, whatever is installed (a report run's
counting wrapper, another plugin): the one way to reach it that works in every mode.
"""

from __future__ import annotations

import time
from typing import Any

import fl_patch

TARGET = "megatron.core.optimizer.clip_grads.get_grad_norm_fp32"
SECONDS: list[float] = []  # what the wrapper measured, for the plugin's own tests


def get_grad_norm_fp32(grads_for_norm: Any, norm_type: float = 2, grad_stats_parallel_group: Any = None) -> float:
    start = time.perf_counter()
    norm = fl_patch.original(TARGET)(grads_for_norm, norm_type, grad_stats_parallel_group)
    SECONDS.append(time.perf_counter() - start)
    return norm
