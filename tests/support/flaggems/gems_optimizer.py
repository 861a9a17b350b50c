"""A few optimizer steps of megatron-core's GPT on a CPU, with or without the FlagGems pack's optimizer patches.

Run by ``tests/impls/test_flaggems.py`` twice, with ``MG_FL_PREFER=flaggems`` (the pack, then
the CPU pack for everything else) and without (the CPU pack alone: upstream's torch fallback,
``torch.optim.AdamW`` with its foreach kernels). fl_patch is installed before megatron is
imported. For each setting (fp32; bf16 with fp32 main parameters; bf16 with the distributed
optimizer) it trains a 2-layer GPT for six steps with gradient clipping and prints one JSON
line: the class and kernel of the torch optimizer megatron built, the losses, the gradient
norms and the final parameters' sums.
"""

from __future__ import annotations

import json
import os

import fl_patch

fl_patch.install()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def main() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("GEMS_PORT", "29541"))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(1, 1)
    out = {}
    for name, dtype, distributed in (
        ("fp32", torch.float32, False),
        ("bf16", torch.bfloat16, False),
        ("bf16_distributed", torch.bfloat16, True),
    ):
        torch.manual_seed(11)
        model_parallel_cuda_manual_seed(11)
        cfg = TransformerConfig(
            num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=96,
            normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
            bias_activation_fusion=False, masked_softmax_fusion=False, apply_rope_fusion=False,
            gradient_accumulation_fusion=False, attention_dropout=0.0, hidden_dropout=0.0,
            use_cpu_initialization=True, bf16=dtype is torch.bfloat16, params_dtype=dtype,
        )  # fmt: skip
        model = GPTModel(
            config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
            vocab_size=128, max_sequence_length=16, position_embedding_type="rope",
        )  # fmt: skip
        if dtype is not torch.float32:
            model = Float16Module(cfg, model)
        ddp = DistributedDataParallel(
            config=cfg,
            ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=distributed),
            module=model,
        )
        optimizer = get_megatron_optimizer(
            OptimizerConfig(
                optimizer="adam", lr=3e-3, weight_decay=0.1, clip_grad=0.05, bf16=dtype is torch.bfloat16,
                params_dtype=dtype, use_distributed_optimizer=distributed,
            ),
            [ddp],
        )  # fmt: skip
        inner = optimizer.chained_optimizers[0] if hasattr(optimizer, "chained_optimizers") else optimizer
        torch_optimizer = inner.optimizer
        gen = torch.Generator().manual_seed(3)
        tokens = torch.randint(0, 128, (6, 2, 17), generator=gen)
        position_ids = torch.arange(16).expand(2, 16)
        losses, norms = [], []
        for step in range(6):
            ddp.zero_grad_buffer()
            optimizer.zero_grad()
            batch = tokens[step]
            loss = ddp(batch[:, :-1], position_ids, None, labels=batch[:, 1:]).float().mean()
            loss.backward()
            ddp.finish_grad_sync()
            updated, grad_norm, _ = optimizer.step()
            assert updated
            losses.append(loss.item())
            norms.append(float(grad_norm))
        out[name] = {
            "optimizer": type(torch_optimizer).__module__ + "." + type(torch_optimizer).__name__,
            # A replaced class is installed as fl_patch's stand-in named where the target lives
            # (isinstance against the name holds); the impl is in its MRO.
            "optimizer_mro": [c.__module__ + "." + c.__qualname__ for c in type(torch_optimizer).__mro__],
            "fused": [bool(g.get("fused")) for g in torch_optimizer.param_groups],
            "decoupled": [bool(g.get("decoupled_weight_decay")) for g in torch_optimizer.param_groups],
            "losses": losses,
            "grad_norms": norms,
            "param_sums": [p.detach().double().sum().item() for p in ddp.module.parameters()],
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
