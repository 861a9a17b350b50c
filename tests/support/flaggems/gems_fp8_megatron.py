"""fp8 without Transformer Engine on the FlagGems pack, inside real megatron-core, on a CPU.

Run by ``tests/impls/test_flaggems_fp8.py`` with ``MG_FL_PREFER=flaggems`` (the pack's impls; on a CPU the fp8 casts run in
torch, or in Triton's interpreter with ``TRITON_INTERPRET=1``, and the fp8 GEMMs are torch's ``_scaled_mm``). Checks:
megatron's ``fp8_utils.get_fp8_context`` is the pack's; megatron's TE spec built with ``fp8`` runs every linear in fp8
(tensorwise, delayed, blockwise; e4m3 and hybrid), loss and gradients near the bf16 model's with the same weights;
every fp8 option the pack cannot serve stops the build with one error naming it; the local spec under fp8 is refused;
``first_last_layers_bf16`` keeps those layers bf16; delayed scaling's state goes through ``state_dict`` /
``_extra_state`` in TE's layout and a TE-written state loads; MoE's grouped experts run in fp8 with megatron's fp8
padding; a few Adam steps through megatron's DDP and optimizer (gradient accumulation fusion) train. Prints one JSON
line; exits non-zero on a failed check.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import types
from dataclasses import dataclass

import fl_patch

fl_patch.install()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SEQ, BATCH, VOCAB = 64, 2, 128


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def main() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("GEMS_PORT", "29577"))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_layer_local_spec,
        get_gpt_layer_with_transformer_engine_spec,
    )
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer import transformer_block
    from megatron.core.transformer.transformer_config import TransformerConfig

    from fl_patch.impls.flaggems import fp8
    from fl_patch.impls.te.modules import TEFeatureError

    parallel_state.initialize_model_parallel(1, 1)
    out: dict[str, object] = {}
    import megatron.core.fp8_utils as fp8_utils

    # (fl_patch installs its own function running the pack's code: core/patch.py)
    assert fp8_utils.get_fp8_context.__code__ is fp8.get_fp8_context.__code__, fp8_utils.get_fp8_context
    assert transformer_block.get_fp8_context is fp8_utils.get_fp8_context  # the name transformer_block bound at import

    def config(**cfg: object) -> TransformerConfig:
        # sizes the block-scaled GEMMs take too: every linear's features and the 128 tokens multiples of 128
        base: dict = dict(
            num_layers=2, hidden_size=128, num_attention_heads=4, num_query_groups=4, ffn_hidden_size=256,
            use_cpu_initialization=True, normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu,
            add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0, bias_activation_fusion=False,
            apply_rope_fusion=False,
        )  # fmt: skip
        base.update(cfg)
        return TransformerConfig(**base)

    def build(local: bool = False, **cfg: object) -> GPTModel:
        torch.manual_seed(1)
        model_parallel_cuda_manual_seed(1)
        c = config(**cfg)
        experts = c.num_moe_experts
        spec = (
            get_gpt_layer_local_spec(num_experts=experts, moe_grouped_gemm=c.moe_grouped_gemm)
            if local
            else get_gpt_layer_with_transformer_engine_spec(num_experts=experts, moe_grouped_gemm=c.moe_grouped_gemm)
        )
        return GPTModel(
            config=c, transformer_layer_spec=spec, vocab_size=VOCAB, max_sequence_length=SEQ,
            position_embedding_type="rope",
        )  # fmt: skip

    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    positions = torch.arange(SEQ).expand(BATCH, SEQ)

    def loss_and_grads(model: GPTModel) -> tuple[float, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    def counts() -> dict[str, int]:
        summary = fp8.fp8_summary()
        return {k: summary[k] for k in ("fp8_gemm_calls", "bf16_calls")}

    def reset() -> None:
        fp8.STATS.update(fp8_gemm_calls=0, bf16_calls=0, weight_casts=0)

    # ------------------------------------------------------------------ dense: every recipe and format
    reference = build()
    ref_loss, ref_grads = loss_and_grads(reference)
    for name, fmt, recipe in (
        ("tensorwise_hybrid", "hybrid", "tensorwise"),
        ("tensorwise_e4m3", "e4m3", "tensorwise"),
        ("delayed_hybrid", "hybrid", "delayed"),
        ("blockwise_e4m3", "e4m3", "blockwise"),
    ):
        model = build(fp8=fmt, fp8_recipe=recipe)
        model.load_state_dict(reference.state_dict(), strict=False)  # (the bf16 model has no fp8 extra state)
        linears = [m for m in model.modules() if getattr(m, "_fl_fp8", None) is not None]
        reset()
        loss, grads = loss_and_grads(model)
        if recipe == "delayed":  # the first step casts with scale 1 (no history yet), as TE: take the second
            loss, grads = loss_and_grads(model)
            reset()
            loss, grads = loss_and_grads(model)
        worst = max(rel(grads[n], ref_grads[n]) for n in ref_grads)
        result = {
            "linears_with_fp8": len(linears), "loss": loss, "bf16_loss": ref_loss,
            "loss_rel": abs(loss - ref_loss) / ref_loss, "worst_grad_rel": worst, "calls": counts(),
        }  # fmt: skip
        out[name] = result
        assert len(linears) == 4 * 2, result
        assert result["calls"] == {"fp8_gemm_calls": 8, "bf16_calls": 0}, result
        assert result["loss_rel"] < 0.01 and worst < (0.2 if fmt == "hybrid" else 0.12), result

    # ------------------------------------------------------------------ refusals, each named
    refusals = {
        "fp8_recipe='mxfp8'": dict(fp8="e4m3", fp8_recipe="mxfp8"),
        "fp8_param=True": dict(fp8="hybrid", fp8_recipe="tensorwise", fp8_param=True),
        "fp8_dot_product_attention=True": dict(fp8="hybrid", fp8_recipe="tensorwise", fp8_dot_product_attention=True),
        "fp8_multi_head_attention=True": dict(fp8="hybrid", fp8_recipe="tensorwise", fp8_multi_head_attention=True),
        "fp8='hybrid' with fp8_recipe='blockwise'": dict(fp8="hybrid", fp8_recipe="blockwise"),
        "recompute_granularity='full'": dict(
            fp8="hybrid",
            fp8_recipe="delayed",
            recompute_granularity="full",
            recompute_method="uniform",
            recompute_num_layers=1,
        ),
        "fp8_recipe='custom'": dict(fp8="e4m3", fp8_recipe="custom", fp8_quantizer_factory="os.path.join"),
    }
    refused: dict[str, str] = {}
    for needle, cfg in refusals.items():
        try:
            build(**cfg)
        except TEFeatureError as exc:
            refused[needle] = str(exc)
            assert needle in str(exc), (needle, str(exc))
        else:
            raise AssertionError(f"{needle}: built without an error")
    try:
        build(local=True, fp8="hybrid", fp8_recipe="tensorwise")
    except TEFeatureError as exc:
        refused["local spec"] = str(exc)
        assert "no fp8-capable linear" in str(exc) and "transformer_engine" in str(exc), str(exc)
    else:
        raise AssertionError("the local spec under fp8 built without an error")
    out["refused"] = refused

    # ------------------------------------------------------------------ activation recompute (TE's checkpoint)
    recompute: dict[str, object] = {}
    plain = build(fp8="hybrid", fp8_recipe="tensorwise")
    plain_loss, plain_grads = loss_and_grads(plain)
    for name, cfg in (
        ("full", dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)),
        ("selective_mlp", dict(recompute_granularity="selective", recompute_modules=["mlp"])),
    ):
        model = build(fp8="hybrid", fp8_recipe="tensorwise", **cfg)
        model.load_state_dict(plain.state_dict())
        reset()
        loss, grads = loss_and_grads(model)
        worst = max(rel(grads[n], plain_grads[n]) for n in plain_grads)
        recompute[name] = {"loss_diff": abs(loss - plain_loss), "worst_grad_rel": worst, "calls": counts()}
        # the recomputed forward ran in fp8 as the first did: the same gradients, and the recomputed linears counted
        assert recompute[name]["loss_diff"] == 0.0 and worst < 1e-6, recompute
        assert counts()["fp8_gemm_calls"] == (16 if name == "full" else 12) and counts()["bf16_calls"] == 0, recompute
    out["recompute"] = recompute

    # ------------------------------------------------------------------ first / last layers in bf16
    model = build(
        num_layers=3, fp8="e4m3", fp8_recipe="tensorwise", first_last_layers_bf16=True,
        num_layers_at_start_in_bf16=1, num_layers_at_end_in_bf16=1,
    )  # fmt: skip
    reset()
    loss_and_grads(model)
    out["first_last_layers_bf16"] = counts()
    assert counts() == {"fp8_gemm_calls": 4, "bf16_calls": 0}, counts()  # the middle layer's 4 linears only

    # ------------------------------------------------------------------ delayed scaling: TE's state, checkpoints
    model = build(fp8="hybrid", fp8_recipe="delayed", fp8_amax_history_len=4, fp8_amax_compute_algo="max")
    for _ in range(3):
        loss_and_grads(model)
    qkv = model.decoder.layers[0].self_attention.linear_qkv
    state = qkv.get_extra_state()
    loaded = pickle.loads(state.numpy().tobytes())
    shapes = {k: tuple(v.shape) for k, v in loaded.items() if isinstance(v, torch.Tensor)}
    assert shapes == {
        "scale_fwd": (3,), "amax_history_fwd": (4, 3), "scale_bwd": (2,), "amax_history_bwd": (4, 2)
    }, shapes  # fmt: skip
    # TE's layout between steps: row 0 of each history zero; the input's scale from the max of its history
    history = loaded["amax_history_fwd"]
    assert float(history[0].abs().max()) == 0.0 and float(history[:, 0].max()) > 0, history
    want_scale = 448.0 / float(history[:, 0].max())
    assert abs(float(loaded["scale_fwd"][0]) - want_scale) <= 1e-6 * want_scale, (loaded["scale_fwd"], want_scale)
    fresh = build(fp8="hybrid", fp8_recipe="delayed", fp8_amax_history_len=4, fp8_amax_compute_algo="max")
    fresh.load_state_dict(model.state_dict())
    for key, value in qkv._fl_fp8._delayed.items():
        assert torch.equal(fresh.decoder.layers[0].self_attention.linear_qkv._fl_fp8._delayed[key], value), key
    # a state Transformer Engine wrote (its recipe object pickled by class name), read without TE
    recipe_module = types.ModuleType("transformer_engine.common.recipe")

    @dataclass
    class DelayedScaling:
        margin: int = 0
        amax_history_len: int = 4

    DelayedScaling.__module__ = "transformer_engine.common.recipe"
    DelayedScaling.__qualname__ = "DelayedScaling"
    recipe_module.DelayedScaling = DelayedScaling  # type: ignore[attr-defined]
    names = ("transformer_engine", "transformer_engine.common", "transformer_engine.common.recipe")
    for module_name in names:
        sys.modules[module_name] = recipe_module
    try:
        te_state = {
            "recipe": DelayedScaling(),
            "scale_fwd": torch.tensor([2.0, 3.0, 1.0]),
            "amax_history_fwd": torch.rand(4, 3),
            "scale_bwd": torch.tensor([5.0, 1.0]),
            "amax_history_bwd": torch.rand(4, 2),
            "extra_fp8_variables": {"num_gemms": 1, "fp8_checkpoint": True},
        }
        te_bytes = torch.frombuffer(bytearray(pickle.dumps(te_state)), dtype=torch.uint8)
    finally:
        for module_name in names:
            del sys.modules[module_name]
    target = fresh.decoder.layers[1].mlp.linear_fc1
    target.set_extra_state(te_bytes)
    assert torch.equal(target._fl_fp8._delayed["scale_fwd"], te_state["scale_fwd"])
    assert torch.equal(target._fl_fp8._delayed["amax_history_bwd"], te_state["amax_history_bwd"])
    out["delayed_checkpoint"] = {"shapes": {k: list(v) for k, v in shapes.items()}, "te_state_loaded": True}

    # ------------------------------------------------------------------ MoE: grouped experts in fp8
    moe_cfg = dict(
        num_moe_experts=4, moe_router_topk=2, moe_grouped_gemm=True, moe_token_dispatcher_type="alltoall",
        moe_ffn_hidden_size=128,
    )  # fmt: skip
    moe_ref = build(**moe_cfg)
    moe_ref_loss, moe_ref_grads = loss_and_grads(moe_ref)
    moe = build(fp8="hybrid", fp8_recipe="tensorwise", **moe_cfg)
    moe.load_state_dict(moe_ref.state_dict(), strict=False)
    assert type(moe.decoder.layers[0].mlp.experts).__name__ == "TEGroupedMLP"
    reset()
    moe_loss, moe_grads = loss_and_grads(moe)
    # (fp8's noise moves near-tied tokens to other experts, so single expert gradients move more than a dense
    # layer's: the whole gradient is compared)
    names = sorted(moe_ref_grads)
    whole = rel(
        torch.cat([moe_grads[n].flatten() for n in names]), torch.cat([moe_ref_grads[n].flatten() for n in names])
    )
    out["moe_grouped"] = {"loss": moe_loss, "bf16_loss": moe_ref_loss, "whole_grad_rel": whole, "calls": counts()}
    # per layer: qkv, proj (dense) and the experts' fc1, fc2 (grouped): 4 fp8 calls a layer
    assert counts() == {"fp8_gemm_calls": 8, "bf16_calls": 0}, counts()
    assert abs(moe_loss - moe_ref_loss) / moe_ref_loss < 0.01 and whole < 0.15, out["moe_grouped"]

    # ------------------------------------------------------------------ training: megatron DDP + optimizer
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func

    def train(**cfg: object) -> list[float]:
        model = build(gradient_accumulation_fusion=True, **cfg)
        ddp = DistributedDataParallel(
            config=model.config, module=model, ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True)
        )
        optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=3e-3, clip_grad=1.0), [ddp])
        forward_backward = get_forward_backward_func()
        batches = [
            torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(i)) for i in range(4)
        ]

        def step(iterator, m):
            t = next(iterator)
            output = m(t[:, :-1], positions, None, labels=t[:, 1:])
            return output, lambda o: (o.float().mean(), {"lm loss": o.float().mean()})

        losses = []
        for _ in range(6):
            ddp.zero_grad_buffer()
            optimizer.zero_grad()
            result = forward_backward(
                forward_step_func=step, data_iterator=iter(batches), model=ddp, num_microbatches=2, seq_length=SEQ,
                micro_batch_size=BATCH, decoder_seq_length=SEQ, forward_only=False,
            )  # fmt: skip
            optimizer.step()
            losses.append(sum(r["lm loss"].item() for r in result) / len(result))
        return losses

    bf16_losses = train()
    reset()
    fp8_losses = train(fp8="hybrid", fp8_recipe="tensorwise")
    out["train"] = {"bf16": bf16_losses, "fp8": fp8_losses, "calls": counts(), "summary": fp8.fp8_summary()}
    assert fp8_losses[-1] < fp8_losses[0] - 0.3, fp8_losses
    assert max(abs(a - b) / b for a, b in zip(fp8_losses, bf16_losses, strict=True)) < 0.02, out["train"]
    # 6 steps x 2 micro-batches x 8 linears, every one in fp8
    assert counts() == {"fp8_gemm_calls": 96, "bf16_calls": 0}, counts()
    # the fp8 weight copies made once a step (megatron's set_is_first_microbatch), reused by the second micro-batch
    assert fp8.fp8_summary()["weight_casts"] == 6 * 8, fp8.fp8_summary()
    out["ok"] = True
    print(json.dumps(out))


if __name__ == "__main__":
    main()
