"""Run under ``python -m fl_patch``: megatron-core without Transformer Engine and flash-attn.

``patched``: the Transformer Engine GPT layer spec builds TE's module tree on fl_patch's
TE-compatible modules (TE's parameter names; the local spec's weights under megatron's own
local -> TE name map, the same loss), a TE-only option is refused by name, activation recompute's
``CheckpointWithoutOutput`` runs, ``is_fa_min_version`` answers False and
``compile_helpers`` returns. ``upstream`` (run with those patches disabled): what each
does without them. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from megatron.core import parallel_state, utils
from megatron.core.datasets.utils import compile_helpers
from megatron.core.models.gpt.gpt_layer_specs import (
    get_gpt_layer_local_spec,
    get_gpt_layer_with_transformer_engine_spec,
)
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.tensor_parallel import CheckpointWithoutOutput
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.transformer_config import TransformerConfig


def _error(call: object) -> str:
    try:
        call()  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001  (SystemExit included: compile_helpers exits)
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def _model(spec: object) -> GPTModel:
    model_parallel_cuda_manual_seed(123)
    torch.manual_seed(123)
    config = TransformerConfig(
        num_layers=2,
        hidden_size=16,
        num_attention_heads=4,
        use_cpu_initialization=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    return GPTModel(config=config, transformer_layer_spec=spec, vocab_size=64, max_sequence_length=8)


def _loss(model: GPTModel) -> torch.Tensor:
    tokens = torch.arange(16).reshape(2, 8) % 64
    position_ids = torch.arange(8).expand(2, 8)
    return model(tokens, position_ids, None, labels=tokens).float().mean()


def _recompute() -> bool:
    x = torch.randn(4, 4, requires_grad=True)
    out = CheckpointWithoutOutput().checkpoint(torch.nn.functional.gelu, x)
    return bool(torch.equal(out, torch.nn.functional.gelu(x)))


dist.init_process_group(backend="gloo", rank=0, world_size=1)
parallel_state.initialize_model_parallel(1, 1)

if sys.argv[1] == "patched":
    te_model, local_model = _model(get_gpt_layer_with_transformer_engine_spec()), _model(get_gpt_layer_local_spec())
    te_state = {k: v for k, v in te_model.state_dict().items() if not k.endswith("_extra_state")}
    # megatron's own table: the local spec's norm prefixes -> TE's fused names (used for its checkpoints).
    keys_map = get_gpt_layer_local_spec().submodules.sharded_state_dict_keys_map
    local_state = {}
    for key, value in local_model.state_dict().items():
        if key.endswith("_extra_state"):
            continue
        for old_prefix, new_prefix in keys_map.items():
            key = key.replace(f".{old_prefix}", f".{new_prefix}")
        local_state[key] = value
    result: dict[str, object] = {
        "te_spec_is_te_module_tree": type(te_model.decoder.layers[0].self_attention.linear_qkv).__name__
        == "TELayerNormColumnParallelLinear"
        and "decoder.layers.0.mlp.linear_fc1.layer_norm_weight" in te_state,
        "same_weights": sorted(te_state) == sorted(local_state)
        and all(torch.equal(te_state[k], local_state[k]) for k in te_state),
        "same_loss": bool(torch.equal(_loss(te_model), _loss(local_model))),
        "te_only_option_refused": "use_te_op_fuser"
        in _error(lambda: get_gpt_layer_with_transformer_engine_spec(use_te_op_fuser=True)),
        "recompute_without_te": _recompute(),
        "fa_min_version": utils.is_fa_min_version("2.7.3"),
        "compile_helpers_returned": _error(compile_helpers) == "no error",
    }
else:
    result = {
        "te_spec": _error(get_gpt_layer_with_transformer_engine_spec),
        "recompute": _error(_recompute),
        "fa_min_version": _error(lambda: utils.is_fa_min_version("2.7.3")),
        "compile_helpers": _error(compile_helpers),
    }
parallel_state.destroy_model_parallel()
dist.destroy_process_group()
print(json.dumps(result))
