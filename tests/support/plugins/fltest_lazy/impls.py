"""Imported by fl_patch only after the target module finished loading; records proof of that."""

import sys

TARGET_MODULE = "megatron.core.optimizer.clip_grads"
_module = sys.modules.get(TARGET_MODULE)
SEEN_TARGET_MODULE = _module is not None
SEEN_INITIALIZING = bool(getattr(getattr(_module, "__spec__", None), "_initializing", False))
# The body has run: the function being replaced exists, and is still upstream's.
SEEN_UPSTREAM = getattr(getattr(_module, "get_grad_norm_fp32", None), "__module__", None) == TARGET_MODULE


def get_grad_norm_fp32(grads_for_norm, norm_type=2, grad_stats_parallel_group=None):
    return -1.0
