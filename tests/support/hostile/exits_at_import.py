"""An impl module that ends the process at import, as a vendor SDK probe might ("no device: exiting")."""

import sys

sys.exit(0)


def get_grad_norm_fp32(
    grads_for_norm: object, norm_type: float = 2, grad_stats_parallel_group: object = None
) -> str:  # never reached
    return "exits_at_import"
