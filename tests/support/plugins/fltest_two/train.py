"""A program that uses both targets: one is called, the other imported only."""

from megatron.core import utils
from megatron.core.optimizer import clip_grads  # noqa: F401  (imported: its patch applies, never called)

print("divide", utils.divide(6, 3))
