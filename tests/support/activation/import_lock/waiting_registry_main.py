"""Run with ``--registry waiting_registry``: megatron's first import loads it."""

import megatron.core.utils as utils

print("ok" if utils.divide(6, 3) == 2 else "wrong")
