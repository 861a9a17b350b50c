"""The distributed optimizer's checkpoint round trip on the GPU with the FlagGems pack's optimizer (torch's fused Adam).

Run by ``tests/impls/test_flaggems_gpu.py`` under ``MG_FL_PREFER=flaggems`` on one GPU (one-rank NCCL group). For each
sharding type megatron writes (``dp_reshardable``, ``fully_reshardable``): a bf16 GPT with megatron's distributed
optimizer trains two steps, saves a dist checkpoint, a fresh model and optimizer load it, and both take one more
step. Prints one JSON line per sharding type: whether the load raised (and what), the Adam step counts restored,
and whether the resumed parameters equal the original run's.
"""

from __future__ import annotations

import json
import sys
import tempfile

import fl_patch

fl_patch.install()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from gems_gpt import _init_distributed  # noqa: E402  (this script's folder is on sys.path)


def _build():
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(5)
    model_parallel_cuda_manual_seed(5)
    cfg = TransformerConfig(
        num_layers=2, hidden_size=128, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=256,
        normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
        bias_activation_fusion=False, masked_softmax_fusion=False, apply_rope_fusion=False,
        gradient_accumulation_fusion=False, attention_dropout=0.0, hidden_dropout=0.0,
        bf16=True, params_dtype=torch.bfloat16,
    )  # fmt: skip
    model = GPTModel(
        config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=256, max_sequence_length=64, position_embedding_type="rope",
    ).cuda()  # fmt: skip
    ddp = DistributedDataParallel(
        config=cfg,
        ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=True),
        module=Float16Module(cfg, model),
    )
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-3, bf16=True, params_dtype=torch.bfloat16, use_distributed_optimizer=True),
        [ddp],
    )  # fmt: skip
    return ddp, optimizer


def _step(ddp, optimizer, seed: int) -> None:
    tokens = torch.randint(0, 256, (2, 65), generator=torch.Generator().manual_seed(seed)).cuda()
    position_ids = torch.arange(64, device="cuda").expand(2, 64)
    ddp.zero_grad_buffer()
    optimizer.zero_grad()
    ddp(tokens[:, :-1], position_ids, None, labels=tokens[:, 1:]).float().mean().backward()
    ddp.finish_grad_sync()
    assert optimizer.step()[0]


def main() -> int:
    from megatron.core import dist_checkpointing, parallel_state

    _init_distributed()  # one-rank NCCL group
    parallel_state.initialize_model_parallel(1, 1)
    for sharding in ("dp_reshardable", "fully_reshardable"):
        metadata = {"distrib_optim_sharding_type": sharding}
        ddp, optimizer = _build()
        _step(ddp, optimizer, 1)
        _step(ddp, optimizer, 2)
        result: dict[str, object] = {"sharding": sharding, "error": None}
        with tempfile.TemporaryDirectory() as where:
            model_state = ddp.module.sharded_state_dict()
            state = {"model": model_state, "optimizer": optimizer.sharded_state_dict(model_state, metadata=metadata)}
            dist_checkpointing.save(state, where)
            fresh, fresh_optimizer = _build()
            model_state = fresh.module.sharded_state_dict()
            template = {
                "model": model_state,
                "optimizer": fresh_optimizer.sharded_state_dict(model_state, is_loading=True, metadata=metadata),
            }
            try:
                loaded = dist_checkpointing.load(template, where)
                fresh.module.load_state_dict(loaded["model"])
                fresh_optimizer.load_state_dict(loaded["optimizer"])
            except Exception as exc:  # noqa: BLE001  (reported: the test says which)
                result["error"] = f"{type(exc).__name__}: {exc}"[:300]
        if result["error"] is None:
            inner = fresh_optimizer.chained_optimizers[0].optimizer
            result["optimizer_mro"] = [c.__name__ for c in type(inner).__mro__]
            result["steps"] = sorted({float(s["step"]) for s in inner.state.values()})
            _step(ddp, optimizer, 3)
            _step(fresh, fresh_optimizer, 3)
            pairs = zip(ddp.module.parameters(), fresh.module.parameters(), strict=True)
            result["resumed_equal"] = all(torch.equal(a, b) for a, b in pairs)
        print(json.dumps(result), flush=True)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
