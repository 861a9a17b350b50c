"""Train upstream megatron-core's local-spec GPT on one GPU, with or without the FlagGems pack.

``python gems_gpt.py --mode curve --out losses.json``: a small GPT on a learnable
synthetic language (a fixed random Markov chain: each token has a few likely
successors), a few hundred steps, the loss of every step. Two runs, one with
``MG_FL_PREFER=flaggems`` and one with ``FL_PATCH=0``, give the loss curves that
``tests/impls/test_flaggems_gpu.py`` compares.

``python gems_gpt.py --mode throughput --out step.json``: the model of
``shared/device/baseline.py`` (16 layers, hidden 2048, 16 heads in 4 query groups,
SwiGLU 5632, RoPE, RMSNorm, vocab 32000, about 0.85 B parameters), seq 2048,
micro-batch 4, bf16, megatron DDP and ``get_megatron_optimizer`` (Adam), 14 steps,
the median step time of steps 5-14 as tokens/s (``bench/gpu_session.sh`` runs it
with and without the pack). ``--preset llama131``: a 1.31 B Llama-style stand-in for
the issue's held-out model (25 layers, hidden 2048, 16 heads in 8 query groups, head
dim 128, SwiGLU 5632, vocab 32000), seq 4096, micro-batch 1. The output also holds
the first step's time and the time from interpreter start to the end of the first
step (the cold start). ``--tp 2`` (under ``torchrun --nproc-per-node 2``): tensor
parallelism over the ranks, ``--sp`` with sequence parallelism; every rank sees the same
tokens, rank 0 writes the output (tokens/s counts each token once).

fl_patch is installed here, before megatron is imported, so ``MG_FL_PREFER`` and
``FL_PATCH`` in the environment decide what runs. The output JSON also holds
fl_patch's report for the pack's targets and the pack's fallbacks.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import sys
import time

_T0 = time.perf_counter()

import fl_patch  # noqa: E402

fl_patch.install()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from gems_data import markov_batches, random_batches, zipf_batches  # noqa: E402  (this script's folder is on sys.path)


def _init_distributed() -> int:
    """One NCCL process group: torchrun's (RANK, WORLD_SIZE, LOCAL_RANK set), else a one-rank group; returns the rank."""
    if "WORLD_SIZE" in os.environ and "LOCAL_RANK" in os.environ:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        torch.distributed.init_process_group("nccl")
        return torch.distributed.get_rank()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK="0")
    torch.cuda.set_device(0)
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    return 0


# aten ops that only move or combine memory: where each is called from says which copy could be avoided
_MEMORY_OPS = ("aten::copy_", "aten::add", "aten::add_", "aten::mul", "aten::fill_", "aten::zero_", "aten::cat")


def _time_us(event: object, name: str) -> float:
    """``event.<name>_device_time_total`` (``..._cuda_time_total`` on an older torch), without touching the
    deprecated name where the new one exists."""
    for attr in (f"{name}device_time_total", f"{name}cuda_time_total"):
        if hasattr(type(event), attr) or attr in getattr(event, "__dict__", {}):
            return float(getattr(event, attr) or 0)
    return 0.0


def _device_us(event: object) -> float:
    return _time_us(event, "self_")


def _write_profile(profiler: object, path: str, step_times: list[float]) -> None:
    """Where two steps' time went: GPU kernel time against the steps' wall time, the top ops and kernels each way,
    the aten ops by input shape, and the Python lines that call the memory-only ops (copies, additions, fills)."""
    events = profiler.key_averages()
    device_us = sum(_device_us(e) for e in events)
    lines = [
        f"two steps: wall {sum(step_times) * 1e3:.1f} ms (profiled), GPU kernel time {device_us / 1e3:.1f} ms",
        "",
    ]
    for key, rows in (("self_cuda_time_total", 80), ("self_cpu_time_total", 30)):
        try:
            lines.append(events.table(sort_by=key, row_limit=rows, max_name_column_width=90))
        except Exception as exc:  # noqa: BLE001  (a torch version without that key)
            lines.append(f"{key}: {exc}")
    try:  # the same ops told apart by their input shapes (needs record_shapes)
        by_shape = profiler.key_averages(group_by_input_shape=True)
        lines += ["", "aten ops by input shape (GPU time):"]
        lines.append(by_shape.table(sort_by="self_cuda_time_total", row_limit=50, max_name_column_width=40))
    except Exception as exc:  # noqa: BLE001
        lines.append(f"by input shape: {exc}")
    try:  # who calls the memory-only ops: the Python frames (with_stack, verbose) or, in backward, the autograd node
        callers: dict[tuple[str, str], list[float]] = {}
        for event in profiler.events():
            if event.name not in _MEMORY_OPS:
                continue
            node, parent = "", event.cpu_parent
            while parent is not None and not node:
                if parent.name.startswith("autograd::engine::evaluate_function:"):
                    node = parent.name.rpartition(": ")[2]
                parent = parent.cpu_parent
            frames = [f for f in (event.stack or []) if "site-packages/torch/" not in f and "built-in" not in f][:6]
            where = f"backward of {node}" if node else " <- ".join(frames) or "?"
            entry = callers.setdefault((event.name, where), [0.0, 0.0])
            entry[0] += _time_us(event, "")
            entry[1] += 1
        lines += ["", "memory-only ops by caller (GPU time of their kernels, calls):"]
        for (name, where), (us, calls) in sorted(callers.items(), key=lambda kv: -kv[1][0])[:40]:
            lines.append(f"{us / 1e3:8.2f} ms {int(calls):5d}x {name}  {where}")
    except Exception as exc:  # noqa: BLE001
        lines.append(f"by caller: {exc}")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print(lines[0], flush=True)


def _wgrad_in_place() -> bool | None:
    """Whether fl_patch's gradient accumulation fusion added into main_grad in one cuBLAS call (None: not used)."""
    module = sys.modules.get("fl_patch.impls.without_te.wgrad_accumulation")
    return None if module is None else module._in_place_trusted


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("curve", "throughput"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--mbs", type=int, default=None)
    parser.add_argument(
        "--microbatches",
        type=int,
        default=1,
        help="micro-batches a step (gradient accumulation: global batch = mbs x this, one optimizer step)",
    )
    parser.add_argument("--preset", choices=("gpt085", "llama131"), default="gpt085")
    parser.add_argument(
        "--tp", type=int, default=1, help="tensor-parallel size (run under torchrun with as many ranks)"
    )
    parser.add_argument("--sp", action="store_true", help="sequence parallelism (upstream's torch norms refuse it)")
    parser.add_argument("--profile", default=None, help="torch.profiler tables of steps 7-8 to this text file")
    parser.add_argument(
        "--gpu-clocks",
        action="store_true",
        help="the SM clock, power and throttle reasons over the timed steps (nvidia-smi)",
    )
    parser.add_argument(
        "--manual-gc",
        action="store_true",
        help="no automatic garbage collection during the steps (as Megatron-LM's --manual-gc): "
        "a host-bound step then has no collector pauses",
    )
    parser.add_argument(
        "--fused-qkv-rope",
        action="store_true",
        help="TransformerConfig(fused_single_qkv_rope=True): needs TE or the pack",
    )
    parser.add_argument("--ffn", type=int, default=None, help="SwiGLU width (held-out shapes: not a multiple of 256)")
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--groups", type=int, default=None)
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="what Megatron-LM's --deterministic-mode does: its env defaults, "
        "torch.use_deterministic_algorithms(True), TransformerConfig(deterministic_mode=True)",
    )
    parser.add_argument("--fp32", action="store_true", help="fp32 parameters and compute (the numerics reference)")
    parser.add_argument(
        "--spec",
        choices=("local", "te"),
        default="local",
        help="te: megatron's Transformer Engine layer spec (without TE: fl_patch's TE-compatible modules)",
    )
    parser.add_argument("--mla", action="store_true", help="multi-latent attention (q/kv LoRA, YaRN; needs --spec te)")
    parser.add_argument("--experts", type=int, default=0, help="MoE: experts per layer (0: dense)")
    parser.add_argument("--topk", type=int, default=2, help="MoE: experts per token")
    parser.add_argument("--moe-ffn", type=int, default=None, help="MoE: each expert's SwiGLU width (default: --ffn)")
    parser.add_argument("--grouped-gemm", action="store_true", help="MoE: moe_grouped_gemm (TEGroupedMLP)")
    parser.add_argument(
        "--moe-fusion",
        action="store_true",
        help="MoE: moe_permute_fusion and moe_router_fusion (TE's fused functions; without TE fl_patch's)",
    )
    parser.add_argument(
        "--bias-act-fusion",
        action="store_true",
        help="bias_activation_fusion=True (the MoE grouped path's weighted SwiGLU; upstream compiles it)",
    )
    parser.add_argument(
        "--seed", type=int, default=1234, help="the weights' seed (the data's stays the same: a seed sweep of curves)"
    )
    parser.add_argument(
        "--fresh-data",
        action="store_true",
        help="a new batch from the Markov chain every step (throughput mode repeats one random batch)",
    )
    parser.add_argument(
        "--data",
        choices=("markov", "zipf"),
        default="markov",
        help="fresh data's chain: markov (uniform tokens: a plateau near ln(vocab), then a steep drop) or zipf "
        "(Zipf-distributed tokens, as words in text: the loss falls from the start)",
    )
    parser.add_argument(
        "--lr", type=float, default=None, help="peak learning rate (default 6e-4 in curve mode, else 1e-4)"
    )
    parser.add_argument(
        "--warmup-steps", type=int, default=0, help="linear warm-up from 0 (megatron's OptimizerParamScheduler)"
    )
    parser.add_argument(
        "--lr-decay-steps",
        type=int,
        default=None,
        help="the step the decay ends at (default --steps; a shorter run of the same schedule passes the longer's)",
    )
    parser.add_argument(
        "--lr-decay",
        choices=("constant", "cosine", "linear"),
        default="constant",
        help="after the warm-up, to a tenth of the peak at the last step (megatron's OptimizerParamScheduler)",
    )
    parser.add_argument(
        "--flaggems-global",
        action="store_true",
        help="FlagGems' own global mode (flag_gems.enable(): every aten op it has), for the docs' repro",
    )
    parser.add_argument(
        "--grad-accum-fusion",
        action="store_true",
        help="gradient_accumulation_fusion=True (Megatron-LM's default): the weight gradient added into the fp32 "
        "main_grad by the GEMM (Apex's extension; without Apex fl_patch's, wgrad_accumulation.py)",
    )
    parser.add_argument(
        "--cuda-graph",
        action="store_true",
        help="megatron-core's full-iteration CUDA graph (FullCudaGraphWrapper, Megatron-LM's "
        "--cuda-graph-impl full_iteration): forward+backward captured after 3 warm-up steps, replayed after",
    )
    parser.add_argument(
        "--fp8",
        choices=("e4m3", "hybrid"),
        default=None,
        help="fp8 GEMMs in the TE spec's linears (megatron's --fp8-format; without TE the pack's fp8.py); needs --spec te",
    )
    parser.add_argument("--fp8-recipe", choices=("tensorwise", "delayed", "blockwise"), default="tensorwise")
    parser.add_argument("--fp8-amax-history-len", type=int, default=1, help="delayed scaling's amax history")
    parser.add_argument("--fp8-amax-compute-algo", choices=("most_recent", "max"), default="most_recent")
    args = parser.parse_args()
    if args.fp8 and args.spec != "te":
        parser.error("--fp8 needs --spec te (fp8 runs in the TE spec's linears; the local spec's stay bf16)")
    if args.flaggems_global:
        import flag_gems

        flag_gems.enable()
    if args.deterministic:
        from megatron.training.determinism import apply_determinism_env

        apply_determinism_env(os.environ)  # CUBLAS_WORKSPACE_CONFIG before the first cuBLAS call
        torch.use_deterministic_algorithms(True)
    curve = args.mode == "curve"
    llama = args.preset == "llama131" and not curve
    layers = args.layers or (4 if curve else 25 if llama else 16)
    hidden = args.hidden or (512 if curve else 2048)
    heads = args.heads or (8 if curve else 16)
    groups = args.groups or (2 if curve else 8 if llama else 4)
    ffn = args.ffn or (1408 if curve else 5632)
    vocab = 4096 if curve else 32000
    seq = args.seq or (512 if curve else 4096 if llama else 2048)
    mbs = args.mbs or (8 if curve else 1 if llama else 4)
    steps = args.steps or (300 if curve else 14)

    rank = _init_distributed()
    if args.cuda_graph:
        # Everything on the stream the graph is captured on, from before the model is built: autograd runs a
        # leaf's gradient accumulation on the stream current when its AccumulateGrad node was made (megatron's
        # DDP makes them at construction), and on torch without set_override_stale_capture_stream (2.11) a
        # backward that waits on the legacy default stream invalidates the capture.
        from megatron.core.full_cuda_graph import get_shared_capture_stream

        graph_stream = get_shared_capture_stream()
        graph_stream.wait_stream(torch.cuda.current_stream())
        torch.cuda.set_stream(graph_stream)
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_layer_local_spec,
        get_gpt_layer_with_transformer_engine_spec,
    )
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(args.tp, 1)
    torch.manual_seed(args.seed)
    # a CUDA graph replays RNG only from generators registered with it: megatron's graph-safe tracker
    model_parallel_cuda_manual_seed(args.seed, use_cudagraphable_rng=args.cuda_graph)
    dtype = torch.float32 if args.fp32 else torch.bfloat16
    moe: dict[str, object] = {}
    if args.experts:
        moe = dict(
            num_moe_experts=args.experts, moe_router_topk=args.topk, moe_token_dispatcher_type="alltoall",
            moe_ffn_hidden_size=args.moe_ffn or ffn, moe_grouped_gemm=args.grouped_gemm,
            moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-2,
            moe_permute_fusion=args.moe_fusion, moe_router_fusion=args.moe_fusion,
        )  # fmt: skip
    if args.mla:
        if args.spec != "te":
            parser.error("--mla needs --spec te (megatron-core's local spec cannot build multi-latent attention)")
        head = hidden // heads
        moe.update(
            q_lora_rank=hidden // 2, kv_lora_rank=hidden // 2, qk_head_dim=head, qk_pos_emb_head_dim=head // 2,
            v_head_dim=head, rope_type="yarn", rotary_scaling_factor=2.0, original_max_position_embeddings=seq // 2,
        )  # fmt: skip
        groups = heads  # MLA has no query groups
    from megatron.core.transformer import MLATransformerConfig

    fp8_options: dict[str, object] = {}
    if args.fp8:
        fp8_options = dict(
            fp8=args.fp8, fp8_recipe=args.fp8_recipe, fp8_amax_history_len=args.fp8_amax_history_len,
            fp8_amax_compute_algo=args.fp8_amax_compute_algo,
        )  # fmt: skip

    cfg = (MLATransformerConfig if args.mla else TransformerConfig)(
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_query_groups=groups,
        ffn_hidden_size=ffn, normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=False, bf16=not args.fp32, params_dtype=dtype, pipeline_dtype=dtype,
        deterministic_mode=args.deterministic,
        bias_activation_fusion=args.bias_act_fusion, masked_softmax_fusion=False, apply_rope_fusion=False,
        gradient_accumulation_fusion=args.grad_accum_fusion, bias_dropout_fusion=False, attention_dropout=0.0, hidden_dropout=0.0,
        fused_single_qkv_rope=args.fused_qkv_rope, tensor_model_parallel_size=args.tp, sequence_parallel=args.sp,
        **moe, **fp8_options,
    )  # fmt: skip
    experts = args.experts or None
    if args.spec == "te":
        spec = get_gpt_layer_with_transformer_engine_spec(
            num_experts=experts, moe_grouped_gemm=args.grouped_gemm, multi_latent_attention=args.mla
        )
    else:
        spec = get_gpt_layer_local_spec(
            num_experts=experts, moe_grouped_gemm=args.grouped_gemm, normalization="RMSNorm"
        )
    model = GPTModel(
        config=cfg,
        transformer_layer_spec=spec,
        vocab_size=vocab,
        max_sequence_length=seq,
        position_embedding_type="rope",
    ).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    # FLOPs follow the parameters a token meets: an MoE token meets topk of the experts
    expert_params = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
    n_active = n_params - expert_params + (expert_params * args.topk // args.experts if args.experts else 0)
    # the input embedding is a lookup (no FLOPs) unless its weight is also the output layer's
    embedding_params = (
        0
        if model.share_embeddings_and_output_weights
        else sum(p.numel() for name, p in model.named_parameters() if "word_embeddings" in name)
    )
    if not args.fp32:
        model = Float16Module(cfg, model)
    model = DistributedDataParallel(
        config=cfg, module=model, ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True)
    )
    lr = args.lr or (6e-4 if curve else 1e-4)
    optimizer_config = OptimizerConfig(
        optimizer="adam", lr=lr, min_lr=lr / 10, bf16=not args.fp32, params_dtype=dtype, clip_grad=1.0
    )
    optimizer = get_megatron_optimizer(optimizer_config, [model])
    scheduler = None
    if args.warmup_steps or args.lr_decay != "constant":
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        wd = optimizer_config.weight_decay
        scheduler = OptimizerParamScheduler(
            optimizer, init_lr=0.0, max_lr=lr, min_lr=lr / 10, lr_warmup_steps=args.warmup_steps,
            lr_decay_steps=args.lr_decay_steps or steps, lr_decay_style=args.lr_decay, start_wd=wd, end_wd=wd, wd_incr_steps=steps,
            wd_incr_style="constant",
        )  # fmt: skip
    fresh = curve or args.fresh_data
    n_micro = args.microbatches
    make_batches = zipf_batches if args.data == "zipf" else markov_batches
    batches = (
        make_batches(vocab, mbs, seq, 7, "cuda", steps * n_micro) if fresh else random_batches(vocab, mbs, seq, "cuda")
    )
    positions = torch.arange(seq, device="cuda").expand(mbs, -1)

    if args.cuda_graph:  # megatron's graph wrapper copies each batch into static buffers: it wants dicts
        batches = ({"tokens": tokens} for tokens in batches)

    def step_fn(iterator, m):
        tokens = next(iterator)
        if isinstance(tokens, dict):
            tokens = tokens["tokens"]
        out = m(tokens[:, :-1], positions, None, labels=tokens[:, 1:])

        def loss_fn(o):
            loss = o.float().mean()
            return loss, {"lm loss": loss}

        return out, loss_fn

    forward_backward = get_forward_backward_func()
    if args.cuda_graph:
        from megatron.core.full_cuda_graph import FullCudaGraphWrapper

        forward_backward = FullCudaGraphWrapper(forward_backward, cuda_graph_warmup_steps=3)
    times, losses, grad_norms = [], [], []
    # the optimizer step's GPU time, by events (no extra host sync inside the step)
    optimizer_events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)
    ]
    first_step_end = _T0
    profiler = None
    clocks = None
    if args.gpu_clocks and rank == 0:  # (rank 0 writes the output)
        from gpu_clocks import Sampler  # (this script's folder is on sys.path)

        clocks = Sampler(torch.cuda.current_device())

    def timed(step: int) -> bool:  # the steps the median is taken over: after warm-up, not the profiled ones
        return step >= 4 and not (args.profile and step in (6, 7))

    if args.manual_gc:
        gc.collect()
        gc.freeze()  # the model's and optimizer's objects are never scanned again
        gc.disable()
    for step in range(steps):
        if args.profile and step == 6:
            profiler = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                record_shapes=True,
                with_stack=True,
                # (the Python frames of each event are kept only in verbose mode)
                experimental_config=torch._C._profiler._ExperimentalConfig(verbose=True),
            )
            profiler.__enter__()
        if profiler is not None and step == 8:
            torch.cuda.synchronize()
            profiler.__exit__(None, None, None)
            _write_profile(profiler, args.profile, times[6:8])
            profiler = None
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        result = forward_backward(
            forward_step_func=step_fn, data_iterator=batches, model=model, num_microbatches=n_micro, seq_length=seq,
            micro_batch_size=mbs, decoder_seq_length=seq, forward_only=False,
        )  # fmt: skip
        optimizer_events[step][0].record()
        _, grad_norm, _ = optimizer.step()
        optimizer_events[step][1].record()
        if scheduler is not None:
            scheduler.step(increment=1)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if clocks is not None and timed(step):
            clocks.window(t0, t0 + times[-1])
        if len(times) == 1:
            first_step_end = time.perf_counter()
        losses.append(sum(r["lm loss"].item() for r in result) / len(result))
        grad_norms.append(float(grad_norm))
    steady = sorted(t for i, t in enumerate(times) if timed(i))
    median = steady[len(steady) // 2] if steady else float("nan")
    optimizer_ms = sorted(b.elapsed_time(e) for i, (b, e) in enumerate(optimizer_events) if i >= 4)
    tokens_per_step = mbs * n_micro * seq
    # Model FLOPs per token as Megatron-LM's num_floating_point_operations counts them: 6 per weight a token
    # multiplies by (the input embedding is a lookup, no FLOPs, unless it is also the output layer), plus the
    # causal attention matmuls (scores and context: forward 4*s*d per layer and token, halved by the causal
    # mask, backward twice the forward).
    flops_per_token = 6 * (n_active - embedding_params) + 6 * layers * heads * (hidden // heads) * seq
    from fl_patch.impls.flaggems._runtime import fallback_summary

    inner = optimizer.chained_optimizers[0] if hasattr(optimizer, "chained_optimizers") else optimizer
    sdpa = sys.modules.get("fl_patch.impls.flaggems.sdpa")
    sdpa_calls = sdpa.CALLS["cudnn"] if sdpa is not None else 0

    report = [
        {"target": r.target, "status": r.status.value, "detail": r.detail}
        for r in fl_patch.report()
        if r.vendor == "flaggems"
    ]
    out = {
        "mode": args.mode,
        "preset": args.preset,
        "groups": groups,
        "first_step_s": times[0] if times else None,
        "start_to_first_step_s": first_step_end - _T0 if times else None,
        "pack": os.environ.get("MG_FL_PREFER", "") == "flaggems" and fl_patch.is_installed(),
        "fused_qkv_rope": args.fused_qkv_rope,
        "params": n_params,
        "layers": layers,
        "hidden": hidden,
        "seq": seq,
        "mbs": mbs,
        "steps": steps,
        "manual_gc": args.manual_gc,
        "cuda_graph": args.cuda_graph,
        "grad_accum_fusion": args.grad_accum_fusion,
        "wgrad_in_place": _wgrad_in_place(),
        "losses": losses,
        "grad_norms": grad_norms,
        "ffn": ffn,
        "heads": heads,
        "vocab": vocab,
        "fp32": args.fp32,
        "spec": args.spec,
        "mla": args.mla,
        "experts": args.experts,
        "topk": args.topk if args.experts else None,
        "grouped_gemm": args.grouped_gemm,
        "moe_fusion": args.moe_fusion,
        "bias_act_fusion": args.bias_act_fusion,
        "module_classes": sorted({type(m).__name__ for m in model.modules() if type(m).__name__.startswith("TE")}),
        "deterministic": args.deterministic,
        "fresh_data": fresh,
        "data": args.data if fresh else "random",
        "lr": lr,
        "warmup_steps": args.warmup_steps,
        "lr_decay": args.lr_decay,
        "lr_decay_steps": args.lr_decay_steps or steps,
        "seed": args.seed,
        "step_times_s": times,
        "step_s_median": median,
        "microbatches": n_micro,
        "tokens_per_step": tokens_per_step,
        "tokens_per_s": tokens_per_step / median,
        "active_params": n_active,
        "embedding_params": embedding_params,
        "optimizer_step_ms_median": optimizer_ms[len(optimizer_ms) // 2] if optimizer_ms else None,
        "tflops_6N": 6 * n_active * tokens_per_step / median / 1e12,
        "flops_per_token": flops_per_token,
        "tflops_model": flops_per_token * tokens_per_step / median / 1e12,
        "mfu_989": flops_per_token * tokens_per_step / median / 989e12,
        "peak_mem_gb": torch.cuda.max_memory_allocated() / 1e9,
        "torch_optimizer": f"{type(inner.optimizer).__module__}.{type(inner.optimizer).__name__}",
        "optimizer_fused": [bool(g.get("fused")) for g in inner.optimizer.param_groups],
        "cudnn_attention_calls": sdpa_calls,
        "flaggems_report": report,
        "fallbacks": fallback_summary(),
    }
    out["tp"], out["sp"] = args.tp, args.sp
    fp8_module = sys.modules.get("fl_patch.impls.flaggems.fp8")
    out["fp8"], out["fp8_recipe"] = args.fp8, args.fp8_recipe if args.fp8 else None
    out["fp8_summary"] = fp8_module.fp8_summary() if fp8_module is not None else None
    out["device_name"] = torch.cuda.get_device_name()
    if clocks is not None:
        out["gpu_clocks"] = clocks.summary()
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
        print(
            json.dumps(
                {k: v for k, v in out.items() if k not in ("losses", "grad_norms", "step_times_s", "flaggems_report")}
            )
        )
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
