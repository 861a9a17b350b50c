"""Run under ``python -m fl_patch --registry fltest_idioms.registry``: megatron's idioms with class impls.

Trains the demo (examples/train_gpt.py) a few steps with MoE, then prints one JSON line: the
losses, what the class impls saw, and what megatron's own references to the classes do.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "examples"))

import train_gpt
from megatron.core.fusions import fused_bias_gelu
from megatron.core.tensor_parallel.layers import ColumnParallelLinear
from megatron.core.transformer import module as megatron_module
from megatron.core.transformer.moe.moe_layer import BaseMoELayer, MoELayer

import fl_patch

log = Path(sys.argv[1])
train_gpt.main(["--steps", "3", "--spec", "te", "--experts", "2", "--quiet", "--dropout", "0", "--log-file", str(log)])
losses = [json.loads(line)["loss"] for line in log.read_text().splitlines()]

out: dict[str, object] = {"losses": losses}
if "fltest_idioms.registry" in os.environ.get("FL_PATCH_REGISTRY", ""):
    from fltest_idioms import impls

    out["built"] = sorted(set(impls.BUILT))
    x = torch.randn(4, 8)
    bias = torch.randn(8)
    before = impls.DoubledGeLU.calls
    doubled = fused_bias_gelu.bias_gelu_impl(x, bias)  # bound as GeLUFunction.apply at megatron's import
    upstream = fused_bias_gelu.GeLUFunction.apply  # through the name
    out["gelu_calls"] = impls.DoubledGeLU.calls - before
    reference = (bias + x) * 0.5 * (1.0 + torch.tanh(0.79788456 * (bias + x) * (1 + 0.044715 * (bias + x) ** 2)))
    out["gelu_doubled"] = bool(torch.allclose(doubled, 2 * reference, atol=1e-5))
    out["gelu_through_name"] = bool(torch.allclose(upstream(x, bias), 2 * reference, atol=1e-5))
    layer = ColumnParallelLinear(
        8, 8, config=train_gpt.TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1,
                                                  use_cpu_initialization=True),
        init_method=torch.nn.init.zeros_, bias=True, skip_bias_add=False, gather_output=False,
    )  # fmt: skip
    out["name_builds_impl"] = type(layer) is impls.CountingColumnParallelLinear
    out["isinstance"] = isinstance(layer, ColumnParallelLinear) and issubclass(MoELayer, BaseMoELayer)
    out["name_is_upstream"] = megatron_module.MegatronModule is fl_patch.original(
        "megatron.core.transformer.module.MegatronModule"
    )
    # (a ColumnParallelLinear instance holds a local lambda: upstream's instances do not pickle either)
    out["pickled"] = pickle.loads(pickle.dumps(type(layer))) is impls.CountingColumnParallelLinear and (
        pickle.loads(pickle.dumps(ColumnParallelLinear)) is ColumnParallelLinear
    )
    out["applied"] = sorted(r.target.rpartition(".")[2] for r in fl_patch.report() if r.status.value == "applied"
                            and r.source == "fltest_idioms.registry")  # fmt: skip
print(json.dumps(out))
