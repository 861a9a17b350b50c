"""Compare mode on Megatron-LM's own ``pretrain_gpt.py`` (core_v0.19.0, unchanged): the TE layer spec (TE-compatible
modules, no TE), MoE (4 experts, alltoall, EP=2) and multi-latent attention (YaRN), torchrun 2 ranks, with the CPU
pack, ``examples/my_plugin`` and the planted wrong plugin. The planted impls this configuration reaches (RoPE, the
MLP of the experts, Adam) are flagged on both ranks; the ones it does not reach (the local spec's norm, softmax and
mask) are "never called"; nothing else differs; the all-reducing grad norm is never run twice.

Needs ``MEGATRON_LM`` (a Megatron-LM checkout at core_v0.19.0), as ``tests/impls/test_te.py``'s pretrain_gpt.py runs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ..support.compare.compare_runs import fl_patch
from ..support.ports import free_port

MEGATRON_LM = Path(os.environ.get("MEGATRON_LM", "/nonexistent"))
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (MEGATRON_LM / "pretrain_gpt.py").is_file(),
        reason="set MEGATRON_LM to a Megatron-LM checkout (core_v0.19.0) to run pretrain_gpt.py",
    ),
]

ARGS = (
    "--mock-data --tokenizer-type NullTokenizer --vocab-size 128 --make-vocab-size-divisible-by 64 "
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 "
    "--micro-batch-size 2 --global-batch-size 4 --train-iters 3 --lr 1e-3 --log-interval 1 --eval-interval 3 "
    "--eval-iters 1 --num-workers 0 --position-embedding-type rope --normalization RMSNorm --swiglu "
    "--disable-bias-linear --num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall "
    "--moe-ffn-hidden-size 64 --expert-model-parallel-size 2 --multi-latent-attention --q-lora-rank 32 "
    "--kv-lora-rank 32 --qk-head-dim 16 --qk-pos-emb-head-dim 16 --v-head-dim 16 --rotary-scaling-factor 2"
).split()
REACHED = {
    "megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb",
    "megatron.core.transformer.mlp.MLP.forward",
    "megatron.core.optimizer.Adam",
}
NOT_REACHED = {
    "megatron.core.transformer.torch_norm.WrappedTorchNorm",
    "megatron.core.fusions.fused_softmax.FusedScaleMaskSoftmax.forward",
    "megatron.core.transformer.utils.get_default_causal_mask",
}


def test_pretrain_gpt_te_spec_moe_mla_flags_what_it_reaches_and_nothing_else(tmp_path: Path) -> None:
    for name in ("pretrain_gpt.py", "gpt_builders.py", "model_provider.py"):
        shutil.copy(MEGATRON_LM / name, tmp_path / name)
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", f"--master-port={free_port()}"]
    registries = "my_plugin.registry,compare_wrong.registry"
    run = fl_patch(tmp_path, "--registry", registries, "--compare", *torchrun, "pretrain_gpt.py", *ARGS, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    for rank in ("0", "1"):
        records = run.records(rank)
        differs = {t for t, r in records.items() if r["verdict"] == "differs"}
        assert differs == REACHED, differs
        assert all(records[t]["reason"] == "never called in this process" for t in NOT_REACHED)
        norm = records["megatron.core.optimizer.clip_grads.get_grad_norm_fp32"]
        assert norm["reason"].startswith("not run: it communicates"), norm
        assert sum(r["verdict"] == "match" for r in records.values()) >= 8


def _lm_losses(log: str) -> list[str]:
    return [line.split("lm loss:")[1].split("|")[0].strip() for line in log.splitlines() if "| lm loss:" in line]


def test_pretrain_gpt_at_ep2_computes_the_same_losses_with_the_compare_on(tmp_path: Path) -> None:
    """The program gets the impl's results and nothing else changes: megatron's own logged losses with and without
    ``--compare`` are the same to the last printed digit. (Found: the original's run of ``TransformerLayer.forward``,
    stopped at the dispatcher's all-to-all, traced megatron's torch.compile'd bias-dropout-add for its copies; the
    program's next layer then took that graph, whose dropout draws differ from eager's: 4.893719 -> 4.893867.)"""
    for name in ("pretrain_gpt.py", "gpt_builders.py", "model_provider.py"):
        shutil.copy(MEGATRON_LM / name, tmp_path / name)
    logs = []
    for compare in ((), ("--compare", "3")):
        torchrun = [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            f"--master-port={free_port()}",
        ]
        run = fl_patch(
            tmp_path, "--registry", "my_plugin.registry", *compare, *torchrun, "pretrain_gpt.py", *ARGS, timeout=600
        )
        assert run.returncode == 0, run.stderr[-4000:]
        logs.append(_lm_losses(run.stdout + run.stderr))
    assert len(logs[0]) == 3 and logs[0] == logs[1], logs
