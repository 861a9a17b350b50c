"""Megatron-LM's own ``pretrain_gpt.py``, unchanged, under fl_patch on a CPU: the flags recipes pass.

Each configuration is a set of upstream flags (dense variants, MoE routers and dispatchers, MLA, MTP,
parallel layouts, optimizers, checkpoints) added to a tiny GPT on mock data; each runs in a fresh
``python -m fl_patch [-m torch.distributed.run ...] pretrain_gpt.py`` with a time limit. A configuration
ends one of two ways that are right, and everything else is a defect:

- ``trains``: exit 0 and every logged lm loss finite;
- ``refused``: the configuration asks for a feature that needs hardware or a library this machine lacks, and
  the run stops with one error that names it (``expect_refusal`` lists words the message must contain).

A known failure not fixed yet is listed with its cause (``gap``) and reported apart; the exit status is 1 for
anything else.

Run (2 cores: about 30 minutes for the whole table)::

    .venv/bin/python bench/pretrain_flags.py --megatron-lm /tmp/Megatron-LM --json docs/pretrain_flags.json
    .venv/bin/python bench/pretrain_flags.py --megatron-lm /tmp/Megatron-LM --only moe_   # name prefixes
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRETRAIN_FILES = ("pretrain_gpt.py", "gpt_builders.py", "model_provider.py")
ITERS = 4
BASE = (
    "--mock-data --tokenizer-type NullTokenizer --vocab-size 128 --make-vocab-size-divisible-by 64 "
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 "
    f"--micro-batch-size 2 --global-batch-size 4 --train-iters {ITERS} --lr 1e-3 --log-interval 1 "
    f"--eval-interval {ITERS} --eval-iters 1 --num-workers 0 --position-embedding-type rope "
    "--normalization RMSNorm --swiglu --disable-bias-linear"
).split()
MOE = "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-token-dispatcher-type alltoall".split()
MLA = (
    "--multi-latent-attention --q-lora-rank 32 --kv-lora-rank 32 --qk-head-dim 16 --qk-pos-emb-head-dim 16 "
    "--v-head-dim 16 --rotary-scaling-factor 2"
).split()


@dataclass(frozen=True)
class Config:
    name: str
    flags: tuple[str, ...]
    nproc: int = 1
    expect_refusal: tuple[str, ...] = ()  # words the one error must contain; empty: must train
    base: tuple[str, ...] = field(default=tuple(BASE))
    env: tuple[tuple[str, str | None], ...] = ()  # variables set (None: unset) for this run
    gap: str = ""  # a failure known and not fixed yet, with its cause: reported as a gap, not as a new defect


def _c(
    name: str,
    flags: str | list[str],
    nproc: int = 1,
    refuse: tuple[str, ...] = (),
    drop: tuple[str, ...] = (),
    env: tuple[tuple[str, str | None], ...] = (),
    gap: str = "",
) -> Config:
    """A configuration: BASE without the flags in ``drop``, plus ``flags``."""
    base = tuple(f for f in BASE if f not in drop)
    return Config(name, tuple(flags.split() if isinstance(flags, str) else flags), nproc, refuse, base, env, gap)


CONFIGS: tuple[Config, ...] = (
    # dense, the TE spec (transformer_impl's default) unless a flag says local
    _c("dense_te_default", ""),
    _c("dense_local", "--transformer-impl local"),
    _c("dense_qk_layernorm_gqa", "--qk-layernorm --group-query-attention --num-query-groups 2"),
    _c(
        "dense_layernorm_1p_untied",
        "--normalization LayerNorm --apply-layernorm-1p --untie-embeddings-and-output-weights",
    ),
    _c(
        "dense_learned_absolute_bias",
        "--position-embedding-type learned_absolute --add-qkv-bias",
        drop=("--disable-bias-linear",),
    ),
    _c("dense_rope_llama31", "--use-rope-scaling --rotary-base 500000 --rotary-percent 0.5"),
    _c(
        "dense_no_fusions",
        "--no-masked-softmax-fusion --no-bias-swiglu-fusion --no-bias-dropout-fusion --no-rope-fusion",
    ),
    _c("dense_ce_fusion_native", "--cross-entropy-loss-fusion --cross-entropy-fusion-impl native"),
    # upstream refuses this on any machine ("disabled due to stability issues")
    _c(
        "dense_ce_fusion_te",
        "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te",
        refuse=("cross entropy loss fusion",),
    ),
    _c("dense_bf16", "--bf16"),
    _c("dense_fp16", "--fp16 --initial-loss-scale 1024"),
    _c("dense_recompute_full", "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"),
    _c("dense_recompute_selective", "--recompute-granularity selective"),
    _c("dense_per_token_loss_kv_channels", "--calculate-per-token-loss --kv-channels 32"),
    _c("dense_attention_backend_unfused", "--attention-backend unfused"),
    _c("dense_attention_backend_flash", "--attention-backend flash"),
    _c("dense_mtp", "--mtp-num-layers 1 --mtp-loss-scaling-factor 0.1"),
    _c("dense_deterministic", "--deterministic-mode --no-gradient-accumulation-fusion"),
    _c(
        "dense_sgd_cosine",
        "--optimizer sgd --lr-decay-style cosine --lr-warmup-iters 1 --weight-decay 0.1 --clip-grad 1.0",
    ),
    _c("dense_manual_gc_throughput", "--manual-gc --manual-gc-interval 2 --log-throughput --timing-log-level 2"),
    _c("dense_tp2_sp", "--tensor-model-parallel-size 2 --sequence-parallel", nproc=2),
    _c("dense_pp2", "--pipeline-model-parallel-size 2 --num-layers 4", nproc=2),
    _c(
        "dense_pp2_vpp",
        "--pipeline-model-parallel-size 2 --num-layers 4 --num-layers-per-virtual-pipeline-stage 1",
        nproc=2,
    ),
    _c(
        "dense_dp2_distopt_overlap",
        "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather",
        nproc=2,
    ),
    # MoE
    _c("moe_alltoall", MOE),
    _c("moe_allgather", [*MOE[:-1], "allgather"]),
    _c("moe_grouped_gemm", [*MOE, "--moe-grouped-gemm"]),
    _c(
        "moe_seq_aux_loss_z_loss",
        [
            *MOE,
            "--moe-router-load-balancing-type",
            "seq_aux_loss",
            "--moe-aux-loss-coeff",
            "1e-2",
            "--moe-z-loss-coeff",
            "1e-3",
        ],
    ),
    _c(
        "moe_global_aux_loss",
        [*MOE, "--moe-router-load-balancing-type", "global_aux_loss", "--moe-aux-loss-coeff", "1e-2"],
    ),
    _c(
        "moe_sigmoid_expert_bias",
        [
            *MOE,
            "--moe-router-score-function",
            "sigmoid",
            "--moe-router-enable-expert-bias",
            "--moe-router-topk-scaling-factor",
            "2.5",
            "--moe-router-dtype",
            "fp32",
            "--moe-router-load-balancing-type",
            "none",
        ],
    ),
    _c("moe_group_limited_routing", [*MOE, "--moe-router-num-groups", "2", "--moe-router-group-topk", "1"]),
    _c("moe_shared_expert", [*MOE, "--moe-shared-expert-intermediate-size", "64"]),
    _c("moe_layer_freq", [*MOE, "--moe-layer-freq", "[0]+[1]*1"]),
    _c(
        "moe_capacity_drop_pad",
        [
            *MOE,
            "--moe-expert-capacity-factor",
            "1.0",
            "--moe-pad-expert-input-to-capacity",
            "--moe-token-drop-policy",
            "probs",
        ],
    ),
    _c("moe_permute_fusion", [*MOE, "--moe-permute-fusion"]),
    _c("moe_router_fusion", [*MOE, "--moe-router-fusion"]),
    _c("moe_ep2", [*MOE, "--expert-model-parallel-size", "2"], nproc=2),
    _c("moe_ep2_grouped", [*MOE, "--expert-model-parallel-size", "2", "--moe-grouped-gemm"], nproc=2),
    _c(
        "moe_tp2_etp1_sp",
        [*MOE, "--tensor-model-parallel-size", "2", "--expert-tensor-parallel-size", "1", "--sequence-parallel"],
        nproc=2,
    ),
    _c(
        "moe_tp2_etp2_sp_grouped",
        [*MOE, "--tensor-model-parallel-size", "2", "--sequence-parallel", "--moe-grouped-gemm"],
        nproc=2,
    ),
    _c("moe_flex_dispatcher", [*MOE[:-1], "flex", "--expert-model-parallel-size", "2"], nproc=2, refuse=("deepep",)),
    _c(
        "moe_shared_expert_overlap",
        [*MOE, "--moe-shared-expert-intermediate-size", "64", "--moe-shared-expert-overlap"],
    ),
    _c("moe_router_pre_softmax", [*MOE, "--moe-router-pre-softmax"]),
    _c("moe_ep2_distopt", [*MOE, "--expert-model-parallel-size", "2", "--use-distributed-optimizer"], nproc=2),
    _c(
        "moe_ep2_fusions_grouped",
        [
            *MOE,
            "--expert-model-parallel-size",
            "2",
            "--moe-permute-fusion",
            "--moe-router-fusion",
            "--moe-grouped-gemm",
        ],
        nproc=2,
    ),
    # MLA
    _c("mla_yarn", MLA),
    _c("mla_rope_no_q_lora", [*MLA[:1], *MLA[3:], "--rope-type", "rope"]),
    _c("mla_moe_mtp", [*MLA, *MOE, "--mtp-num-layers", "1", "--moe-grouped-gemm"]),
    _c("mla_qk_layernorm_ep2", [*MLA, *MOE, "--qk-layernorm", "--expert-model-parallel-size", "2"], nproc=2),
    _c("dense_softmax_fp32_qk_scaling", "--attention-softmax-in-fp32 --apply-query-key-layer-scaling"),
    # upstream's own bug on every machine: megatron.training passes TransformerConfig a `scaled_init_method`
    # it does not take (argument_utils.py, core_v0.19.0)
    _c("dense_xavier_init", "--init-method-xavier-uniform", refuse=("scaled_init_method",)),
    _c("dense_squared_relu", "--squared-relu", drop=("--swiglu",)),
    _c("dense_save_dist_checkpoint", "--save ckpt --save-interval 2"),
    _c("dense_save_torch_checkpoint", "--save ckpt --save-interval 2 --ckpt-format torch"),
    # both FSDPs assert CUDA_DEVICE_MAX_CONNECTIONS is unset or > 1: run as a user of them would, without it
    _c(
        "dense_torch_fsdp2",
        "--use-torch-fsdp2 --untie-embeddings-and-output-weights",
        nproc=2,
        env=(("CUDA_DEVICE_MAX_CONNECTIONS", None),),
        gap="megatron builds torch FSDP2's DeviceMesh with device type 'cuda' (torch_fully_sharded_data_parallel.py "
        "line 81); FSDP2 then expects parameters on cuda:0, which the CUDA-on-CPU transfer does not reach",
    ),
    _c(
        "dense_megatron_fsdp",
        "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --ckpt-format fsdp_dtensor",
        nproc=2,
        env=(("CUDA_DEVICE_MAX_CONNECTIONS", None),),
    ),
    # what needs TE or a GPU here: one clear error naming it
    _c("refuse_fp8", "--fp8-format hybrid", refuse=("fp8",)),
    _c("refuse_context_parallel", "--context-parallel-size 2", nproc=2, refuse=("context_parallel",)),
    _c(
        "refuse_tp_comm_overlap",
        "--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap",
        nproc=2,
        refuse=("transformer_engine",),
    ),
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _losses(log: str) -> list[float]:
    return [float(m) for m in re.findall(r"\| lm loss: ([-+0-9.eE]+|nan|inf)", log)]


def _error_line(log: str) -> str:
    """The last line that names an exception (the one a user would read first)."""
    lines = [
        ln.strip()
        for ln in log.splitlines()
        if re.search(r"\b\w*(Error|Exception)\b:", ln) and "ChildFailedError" not in ln  # torchrun's own summary
    ]
    return (
        re.sub(r"^\[rank\d+\]:\s*", "", lines[-1])[:400]
        if lines
        else log.strip().splitlines()[-1][:400]
        if log.strip()
        else ""
    )


def run(config: Config, megatron_lm: Path, limit: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="pretrain-flags-") as tmp:
        where = Path(tmp)
        for name in PRETRAIN_FILES:
            shutil.copy(megatron_lm / name, where / name)
        launcher = (
            []
            if config.nproc == 1
            else ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={config.nproc}"]
        )
        cmd = [sys.executable, "-m", "fl_patch", *launcher, "pretrain_gpt.py", *config.base, *config.flags]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FL_PATCH", "MG_FL"))}
        env.update(PYTHONWARNINGS="ignore", CUDA_DEVICE_MAX_CONNECTIONS="1")  # as Megatron-LM's scripts set it
        for name, value in config.env:
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        if config.nproc == 1:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=limit)
            log, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            log = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
            rc = None
        seconds = round(time.perf_counter() - start, 1)
    losses = _losses(log)
    error = _error_line(log) if rc != 0 else ""
    if rc is None:
        outcome = "timeout"
    elif config.expect_refusal:
        named = rc != 0 and all(w.lower() in error.lower() for w in config.expect_refusal)
        outcome = "refused" if named else ("trains" if rc == 0 else "failed")
    else:
        outcome = "trains" if rc == 0 and len(losses) >= ITERS and all(math.isfinite(x) for x in losses) else "failed"
    ok = outcome == ("refused" if config.expect_refusal else "trains") or (
        config.expect_refusal and outcome == "trains"  # a feature made to work instead of refused is fine too
    )
    if config.gap and not ok:
        outcome = "gap"
    return {
        "name": config.name,
        "nproc": config.nproc,
        "flags": " ".join(config.flags),
        "outcome": outcome,
        "ok": bool(ok),
        "gap": config.gap if outcome == "gap" else "",
        "losses": losses[:ITERS],
        "error": error,
        "seconds": seconds,
        "log_tail": "" if ok else log[-4000:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megatron-lm", type=Path, required=True, help="a Megatron-LM checkout (core_v0.19.0)")
    parser.add_argument("--only", default="", help="comma-separated name prefixes")
    parser.add_argument("--limit", type=int, default=400, help="seconds a run may take")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=1, help="run each chosen configuration this many times")
    args = parser.parse_args()
    prefixes = [p for p in args.only.split(",") if p]
    chosen = [c for c in CONFIGS if not prefixes or c.name.startswith(tuple(prefixes))]
    results = []
    for config in [c for c in chosen for _ in range(args.repeat)]:
        r = run(config, args.megatron_lm, args.limit)
        results.append(r)
        shown = f"losses {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}" if r["losses"] else r["error"][:160]
        mark = "ok  " if r["ok"] else "GAP " if r["gap"] else "FAIL"
        print(f"{mark} {r['name']:<34} {r['outcome']:<8} {r['seconds']:>6.1f}s  {shown}", flush=True)
    gaps = [r["name"] for r in results if r["gap"]]
    bad = [r["name"] for r in results if not r["ok"] and not r["gap"]]
    print(
        f"\n{len(results) - len(bad) - len(gaps)} of {len(results)} as they should be"
        + (f"; known gaps (docs/te_spec.md): {', '.join(gaps)}" if gaps else "")
        + (f"; not: {', '.join(bad)}" if bad else "")
    )
    if args.json:
        args.json.write_text(
            json.dumps({"iterations": ITERS, "base": " ".join(BASE), "results": results}, indent=1) + "\n"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
