"""A GPT at tensor-parallel size 2 on a CPU (gloo), with or without the FlagGems pack, kernels in Triton's interpreter.

Run by ``tests/impls/test_flaggems_interpret.py`` under ``python -m torch.distributed.run
--nproc-per-node 2`` with ``TRITON_INTERPRET=1`` and ``.cache/triton-cpu`` on PYTHONPATH.
``GEMS_TP_MODE`` names the modes the job runs, comma-separated: ``upstream`` (the CPU pack
alone: megatron-core's own code on a CPU), ``pack`` (``MG_FL_PREFER=flaggems``: the pack, the
CPU pack for the rest) and ``pack_sp`` (the pack with sequence parallelism, which upstream's
torch norms refuse). ``upstream`` runs in a job of its own (which vendor serves each target is
decided at import, by ``MG_FL_PREFER``); ``pack`` and ``pack_sp`` share one (``pack,pack_sp``):
the same patches, and each mode builds its own model, DDP and optimizer from the same seeds.
fl_patch is installed before megatron is imported. For each mode, each rank trains a 2-layer
local-spec GPT (fp32, weights initialized on the CPU so every TP layout holds the same model)
for two steps with megatron DDP, ``finalize_model_grads`` and ``get_megatron_optimizer``, and
saves its losses, its gradient shards after the first backward and its parameter shards after
the second step to ``GEMS_TP_OUT/<mode>_rank<r>.pt``; rank 0 prints one JSON line per mode
(which pack ops ran in that mode, its fallbacks). ``GEMS_TP_AGAINST`` (optional): a mode an earlier job saved
to ``GEMS_TP_OUT``; each rank then compares its shards of every mode of this job with that mode's (same parameter
names; the largest relative difference of a loss, a gradient shard, a parameter shard), and rank 0 prints them all
as one more JSON line, ``{"compared": {"<mode>_rank<r>": ...}}``.
"""

from __future__ import annotations

import json
import os

import fl_patch

fl_patch.install()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def main() -> None:
    modes = os.environ["GEMS_TP_MODE"].split(",")
    assert "upstream" not in modes or modes == ["upstream"], "upstream runs in a job of its own"
    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(2, 1)
    calls: dict[str, int] = {}
    if modes != ["upstream"]:  # count what the pack's kernels took
        from fl_patch.impls.flaggems import ops

        for name in ("rms_norm", "swiglu", "rotary", "flash_attention", "vocab_parallel_cross_entropy"):
            real = getattr(ops, name)

            def counted(*args: object, _real=real, _name=name, **kwargs: object) -> object:
                calls[_name] = calls.get(_name, 0) + 1
                return _real(*args, **kwargs)

            setattr(ops, name, counted)
    from fl_patch.impls.flaggems._runtime import fallback_summary, reset_fallbacks

    for mode in modes:  # each mode from the same seeds, with its own model, DDP and optimizer
        calls.clear()
        reset_fallbacks()  # what this mode fell back on, only
        torch.manual_seed(21)
        model_parallel_cuda_manual_seed(21)
        cfg = TransformerConfig(
            num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=96,
            normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
            bias_activation_fusion=False, masked_softmax_fusion=False, apply_rope_fusion=False,
            gradient_accumulation_fusion=False, attention_dropout=0.0, hidden_dropout=0.0,
            use_cpu_initialization=True, tensor_model_parallel_size=2, sequence_parallel=mode == "pack_sp",
        )  # fmt: skip
        model = GPTModel(
            config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
            vocab_size=128, max_sequence_length=16, position_embedding_type="rope",
        )  # fmt: skip
        ddp = DistributedDataParallel(
            config=cfg, ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True), module=model
        )
        optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=1e-2, weight_decay=0.1, clip_grad=1.0, params_dtype=torch.float32),
            [ddp],
        )
        tokens = torch.randint(0, 128, (2, 2, 17), generator=torch.Generator().manual_seed(4))
        position_ids = torch.arange(16).expand(2, 16)
        losses, grads = [], {}
        for step in range(2):
            ddp.zero_grad_buffer()
            optimizer.zero_grad()
            batch = tokens[step]
            loss = ddp(batch[:, :-1], position_ids, None, labels=batch[:, 1:]).float().mean()
            loss.backward()
            finalize_model_grads([ddp])
            if step == 0:
                grads = {n: p.main_grad.detach().clone() for n, p in ddp.module.named_parameters()}
            updated, _, _ = optimizer.step()
            assert updated
            losses.append(loss.item())
        params = {n: p.detach().clone() for n, p in ddp.module.named_parameters()}
        sequence_parallel = {n: bool(getattr(p, "sequence_parallel", False)) for n, p in ddp.module.named_parameters()}
        out_dir = os.environ["GEMS_TP_OUT"]
        torch.save({"losses": losses, "grads": grads, "params": params}, os.path.join(out_dir, f"{mode}_rank{rank}.pt"))
        if rank == 0:
            print(json.dumps({
                "mode": mode, "losses": losses, "calls": dict(calls), "fallbacks": fallback_summary(),
                "sequence_parallel_params": sorted(n for n, v in sequence_parallel.items() if v),
                "optimizer": type(optimizer.optimizer).__name__ if hasattr(optimizer, "optimizer") else "",
                # a replaced class is fl_patch's stand-in named where the target lives: the impl is in its MRO
                "optimizer_mro": [c.__name__ for c in type(optimizer.optimizer).__mro__] if hasattr(optimizer, "optimizer") else [],
            }), flush=True)  # fmt: skip
    against = os.environ.get("GEMS_TP_AGAINST")
    if against:
        compared = {f"{mode}_rank{rank}": _compare(out_dir, mode, against, rank) for mode in modes}
        every: list[dict | None] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(every, compared)
        if rank == 0:
            print(json.dumps({"compared": {k: v for ranks in every for k, v in ranks.items()}}), flush=True)
    torch.distributed.destroy_process_group()


def _compare(out_dir: str, mode: str, against: str, rank: int) -> dict[str, object]:
    """This rank's saved shards of ``mode`` against those ``against`` saved: the largest relative differences."""
    got = torch.load(os.path.join(out_dir, f"{mode}_rank{rank}.pt"))
    ref = torch.load(os.path.join(out_dir, f"{against}_rank{rank}.pt"))

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()

    return {
        "names": sorted(got["grads"]) == sorted(ref["grads"]),
        "loss": max(abs(a - b) / abs(b) for a, b in zip(got["losses"], ref["losses"], strict=True)),
        "grad": max(rel(got["grads"][k], ref["grads"][k]) for k in ref["grads"]),
        "param": max(rel(got["params"][k], ref["params"][k]) for k in ref["params"]),
    }


if __name__ == "__main__":
    main()
