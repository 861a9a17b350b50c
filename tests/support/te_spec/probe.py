"""One process (world size 1, gloo) under fl_patch: megatron-core's TE layer spec without TE, checked many ways.

Prints one JSON line with what it saw; tests/impls/test_te.py asserts on it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch
from megatron.core import dist_checkpointing
from megatron.core import parallel_state as ps
from megatron.core.models.gpt.gpt_layer_specs import (
    get_gpt_layer_local_spec,
    get_gpt_layer_with_transformer_engine_spec,
)
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

VOCAB, SEQ = 64, 16


def build(spec_fn, seed=1, mla=False, **cfg):
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)
    base = dict(
        num_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        use_cpu_initialization=True,
        normalization="RMSNorm",
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    base.update(cfg)
    if mla:
        config = MLATransformerConfig(**base)
        spec = spec_fn(
            multi_latent_attention=True,
            num_experts=base.get("num_moe_experts"),
            moe_grouped_gemm=base.get("moe_grouped_gemm", False),
        )
    else:
        config = TransformerConfig(**base)
        spec = spec_fn(num_experts=base.get("num_moe_experts"), moe_grouped_gemm=base.get("moe_grouped_gemm", False))
    kw = {} if mla else {"position_embedding_type": "rope"}
    return GPTModel(config=config, transformer_layer_spec=spec, vocab_size=VOCAB, max_sequence_length=SEQ, **kw)


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=g)
    return tokens, torch.arange(SEQ).expand(2, SEQ)


def loss_of(model, seed=0):
    tokens, pos = batch(seed)
    return model(tokens, pos, None, labels=torch.roll(tokens, -1, 1)).float().mean()


def train(model, steps=4):
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of(model, seed=0)
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 6))
    return losses


def sharded_keys(model):
    """The checkpoint's keys (ShardedTensor.key / ShardedObject.key: what a dist checkpoint holds)."""
    return sorted(entry.key for entry in model.sharded_state_dict().values())


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", sys.argv[1] if len(sys.argv) > 1 else "29533")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    ps.initialize_model_parallel()
    out: dict[str, object] = {}
    # 1. The module tree: TE's classes, TE's parameter names, megatron's own TE names for the fused norms.
    te = build(get_gpt_layer_with_transformer_engine_spec)
    local = build(get_gpt_layer_local_spec)
    layer = te.decoder.layers[0]
    out["classes"] = {
        "linear_qkv": type(layer.self_attention.linear_qkv).__name__,
        "core_attention": type(layer.self_attention.core_attention).__name__,
        "linear_proj": type(layer.self_attention.linear_proj).__name__,
        "linear_fc1": type(layer.mlp.linear_fc1).__name__,
        "linear_fc2": type(layer.mlp.linear_fc2).__name__,
        "input_layernorm": type(layer.input_layernorm).__name__,
        "final_layernorm": type(te.decoder.final_layernorm).__name__,
    }
    # megatron's own table of TE names: the local spec maps its separate norms onto them for checkpoints.
    keys_map = get_gpt_layer_local_spec().submodules.sharded_state_dict_keys_map
    te_names = {n for n, _ in te.named_parameters()}
    out["megatron_te_norm_names_present"] = sorted(
        f"decoder.layers.0.{prefix}weight" in te_names for prefix in keys_map.values()
    )
    out["no_separate_layer_norms"] = not any(
        n.startswith("decoder.layers.0.input_layernorm") or n.startswith("decoder.layers.0.pre_mlp_layernorm")
        for n in te_names
    )
    te_keys, local_keys = sharded_keys(te), sharded_keys(local)
    out["sharded_keys_equal_local_mapped"] = te_keys == local_keys
    out["sharded_keys_only_te"] = sorted(set(te_keys) - set(local_keys))
    out["sharded_keys_only_local"] = sorted(set(local_keys) - set(te_keys))
    out["extra_state_keys"] = sum(k.endswith("_extra_state") for k in te_keys)
    out["param_count_equal"] = sum(p.numel() for p in te.parameters()) == sum(p.numel() for p in local.parameters())

    # 2. The same computation as the local spec: the same initial weights and losses under training.
    out["same_initial_loss"] = loss_of(te).item() == loss_of(local).item()
    te_losses, local_losses = (
        train(build(get_gpt_layer_with_transformer_engine_spec)),
        train(build(get_gpt_layer_local_spec)),
    )
    out["te_losses"] = te_losses
    out["losses_match_local"] = max(abs(a - b) for a, b in zip(te_losses, local_losses, strict=True)) < 1e-5
    out["te_trains"] = te_losses[-1] < te_losses[0]

    # 3. Checkpoints: TE -> TE (a fresh model with other weights), local -> TE and TE -> local, as megatron allows.
    # As megatron's own dist_checkpointing tests load: only _extra_state may differ between checkpoint and model,
    # and the loaded state dict then goes through a *strict* load_state_dict (TE's core attention drops its own
    # missing _extra_state; a strict=False here once hid that ours did not).
    def roundtrip(src, dst):
        from megatron.core.dist_checkpointing.validation import StrictHandling

        with tempfile.TemporaryDirectory() as d:
            dist_checkpointing.save(src.sharded_state_dict(), d)
            state, missing, unexpected = dist_checkpointing.load(
                dst.sharded_state_dict(), d, strict=StrictHandling.RETURN_ALL
            )
            assert all("_extra_state" in k for k in [*missing, *unexpected]), (missing, unexpected)
            dst.load_state_dict(state)
        return loss_of(src).item() == loss_of(dst).item()

    out["ckpt_te_to_te"] = roundtrip(
        build(get_gpt_layer_with_transformer_engine_spec, seed=3),
        build(get_gpt_layer_with_transformer_engine_spec, seed=4),
    )
    out["ckpt_local_to_te"] = roundtrip(
        build(get_gpt_layer_local_spec, seed=5), build(get_gpt_layer_with_transformer_engine_spec, seed=6)
    )
    out["ckpt_te_to_local"] = roundtrip(
        build(get_gpt_layer_with_transformer_engine_spec, seed=7), build(get_gpt_layer_local_spec, seed=8)
    )

    # 4. MoE: 4 experts, top-2, alltoall; grouped GEMM off (SequentialMLP) and on (TEGroupedMLP): same checkpoint keys,
    #    and a SequentialMLP checkpoint gives the grouped model the same loss.
    moe = dict(
        num_moe_experts=4,
        moe_router_topk=2,
        moe_token_dispatcher_type="alltoall",
        moe_ffn_hidden_size=48,
        moe_aux_loss_coeff=0.0,
    )
    seq, grp = (
        build(get_gpt_layer_with_transformer_engine_spec, seed=9, **moe),
        build(get_gpt_layer_with_transformer_engine_spec, seed=10, moe_grouped_gemm=True, **moe),
    )
    out["moe_experts_classes"] = [
        type(seq.decoder.layers[0].mlp.experts).__name__,
        type(grp.decoder.layers[0].mlp.experts).__name__,
    ]
    out["moe_sharded_keys_equal"] = sharded_keys(seq) == sharded_keys(grp)
    out["moe_seq_to_grouped_ckpt"] = roundtrip(seq, grp)
    out["moe_losses_sequential"] = train(build(get_gpt_layer_with_transformer_engine_spec, seed=9, **moe))
    out["moe_losses_grouped"] = train(
        build(get_gpt_layer_with_transformer_engine_spec, seed=9, moe_grouped_gemm=True, **moe)
    )

    # 5. MLA with q/kv LoRA ranks and YaRN RoPE, TE spec (TELinear duplicated down projections), trains.
    mla = dict(
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_head_dim=8,
        qk_pos_emb_head_dim=8,
        v_head_dim=8,
        rope_type="yarn",
        rotary_scaling_factor=2.0,
        original_max_position_embeddings=8,
        use_cpu_initialization=False,
    )
    mla_model = build(get_gpt_layer_with_transformer_engine_spec, seed=11, mla=True, **mla)
    att = mla_model.decoder.layers[0].self_attention
    out["mla_classes"] = [
        type(att.linear_q_down_proj).__name__,
        type(att.linear_kv_down_proj).__name__,
        type(att.core_attention).__name__,
    ]
    out["mla_losses"] = train(mla_model)
    out["mla_moe_losses"] = train(
        build(get_gpt_layer_with_transformer_engine_spec, seed=12, mla=True, **{**mla, **moe, "moe_grouped_gemm": True})
    )

    # 6. A TE-only feature: one clear error naming it.
    try:
        build(get_gpt_layer_with_transformer_engine_spec, fp8="hybrid")
        out["fp8"] = "built"
    except Exception as exc:  # noqa: BLE001
        out["fp8"] = f"{type(exc).__name__}: {exc}"

    print(json.dumps(out))


# The dist_checkpointing writer is a spawn child that re-imports this file: only the parent runs.
if __name__ == "__main__":
    main()
