"""The plugin's own tests, with fl_patch.testing: each check runs in a fresh patched interpreter."""

from fl_patch.testing import check_registry

# Runs in the patched child after the targets' modules were imported: the impls are what megatron calls.
USE_THEM = """
import torch
from megatron.core import utils
from megatron.core.optimizer import clip_grads
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer import TransformerConfig
from my_plugin import clip_grads as mine, norm

assert utils.divide(6, 3) == 2
try:
    utils.divide(7, 3)
except ValueError as exc:
    assert "7 is not divisible by 3" in str(exc)
else:
    raise AssertionError("upstream's divide ran")
torch.distributed.init_process_group("gloo", rank=0, world_size=1, store=torch.distributed.HashStore())
assert clip_grads.get_grad_norm_fp32([torch.ones(4)]) == 2.0
assert len(mine.SECONDS) == 1
config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1, normalization="RMSNorm")
assert isinstance(WrappedTorchNorm(config, 8), norm.MyRMSNorm)
"""


def test_every_patch_applies_and_runs() -> None:
    result = check_registry("my_plugin.registry", code=USE_THEM)
    result.assert_applied(
        [
            "megatron.core.optimizer.clip_grads.get_grad_norm_fp32",
            "megatron.core.utils.divide",
            "megatron.core.transformer.torch_norm.WrappedTorchNorm",
            "megatron.core.transformer.transformer_layer.TransformerLayer.forward",
        ]
    )
