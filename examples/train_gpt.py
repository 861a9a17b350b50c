"""Train a small GPT with megatron-core: an ordinary training script, nothing fl_patch-specific.

It uses megatron-core's own pieces end to end: ``GPTModel`` (local layer spec, RoPE),
``MockGPTDataset``, megatron ``DistributedDataParallel``, ``get_megatron_optimizer``
(optionally the distributed optimizer), ``OptimizerParamScheduler``,
``get_forward_backward_func`` and ``dist_checkpointing``. It runs on whatever device
torch offers: CUDA if available, else the CPU.

On a machine without a GPU, upstream megatron-core stops at its first CUDA assumption::

    python examples/train_gpt.py                 # fails inside megatron-core
    python -m fl_patch examples/train_gpt.py     # trains, with fl_patch's CPU pack

What recipes build: ``--spec te`` (the Transformer Engine layer spec; TE itself is not
needed under fl_patch), ``--experts 4`` (MoE, top-2, alltoall; ``--grouped-gemm``; ``--ep 2``
under two processes), ``--mla`` (multi-latent attention, YaRN RoPE; with ``--spec te``)::

    python -m fl_patch examples/train_gpt.py --spec te --experts 4 --grouped-gemm --mla

Two processes with gloo (tensor parallel 2; without ``--tp 2``, data parallel 2)::

    torchrun --nproc-per-node 2 -m fl_patch examples/train_gpt.py --tp 2
    python -m fl_patch -m torch.distributed.run --nproc-per-node 2 examples/train_gpt.py --tp 2

Checkpoints: ``--save DIR`` writes ``DIR/step_NNNNNN`` every ``--save-interval`` steps
and at the end; ``--load DIR`` resumes from the latest of them (or ``--load
DIR/step_NNNNNN`` from that one), weights, optimizer, schedule and RNG state included.
``--log-file FILE`` writes one JSON line per step (loss, learning rate, loss scale,
whether the update was applied, tokens/s).

Nothing here is tuned for the CPU: megatron-core's defaults already leave its fused
kernels (Transformer Engine, Apex, ``torch.compile``) off, and this script keeps them so.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

# megatron-core says as it imports what it falls back to without Transformer Engine, Apex and
# absl, which is expected on a CPU, and logs notes on its mock dataset's cache and deprecated
# classes: about 25 lines before the first step. --verbose shows them.
if "--verbose" not in sys.argv:
    for noise in (r".* not installed", r"full scope is deprecated", r"MimoModelConfig is experimental"):
        warnings.filterwarnings("ignore", message=noise, category=UserWarning)
    logging.getLogger("megatron.core").setLevel(logging.ERROR)

import torch
import torch.distributed as dist
from megatron.core import dist_checkpointing, parallel_state, tensor_parallel
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset
from megatron.core.dist_checkpointing.mapping import ShardedObject
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import (
    get_gpt_layer_local_spec,
    get_gpt_layer_with_transformer_engine_spec,
)
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.tokenizers import MegatronTokenizer
from megatron.core.transformer import MLATransformerConfig, TransformerConfig
from megatron.core.transformer.module import Float16Module

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: at least 1")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = p.add_argument_group("model size")
    size.add_argument("--num-layers", type=int, default=2)
    size.add_argument("--hidden-size", type=int, default=64)
    size.add_argument("--num-heads", type=int, default=4)
    size.add_argument("--seq-length", type=int, default=64)
    size.add_argument("--vocab-size", type=int, default=128)
    train = p.add_argument_group("training")
    train.add_argument("--steps", type=_at_least_one, default=30, help="optimizer steps (the last step number)")
    train.add_argument("--micro-batch-size", type=int, default=4)
    train.add_argument("--num-microbatches", type=int, default=2, help="gradient accumulation per step")
    train.add_argument("--lr", type=float, default=3e-3)
    train.add_argument("--warmup-steps", type=int, default=2)
    train.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout")
    train.add_argument("--precision", choices=sorted(DTYPES), default="fp32")
    train.add_argument(
        "--initial-loss-scale", type=float, default=2.0**16, help="fp16 only: dynamic loss scaling starts here"
    )
    train.add_argument("--recompute", action="store_true", help="full activation recompute")
    train.add_argument("--seed", type=int, default=1234)
    arch = p.add_argument_group("architecture (megatron-core's own options)")
    arch.add_argument(
        "--spec",
        choices=("local", "te"),
        default="local",
        help="layer spec: megatron's local one, or the Transformer Engine one (what recipes build; TE not needed "
        "under fl_patch)",
    )
    arch.add_argument("--experts", type=int, default=0, help="MoE: experts per layer (top-2, alltoall); 0: dense")
    arch.add_argument("--grouped-gemm", action="store_true", help="MoE: one grouped GEMM for all local experts")
    arch.add_argument(
        "--moe-fusion", action="store_true", help="MoE: fused token permutation and router (TE's, without TE here)"
    )
    arch.add_argument("--mla", action="store_true", help="multi-latent attention (q/kv LoRA ranks, YaRN RoPE)")
    arch.add_argument("--normalization", choices=("LayerNorm", "RMSNorm"), default="LayerNorm")
    arch.add_argument("--swiglu", action="store_true", help="SwiGLU MLP (gated linear unit, SiLU)")
    arch.add_argument(
        "--apply-query-key-layer-scaling",
        action="store_true",
        help="scale attention scores down by the layer number, and the softmax input back up",
    )
    par = p.add_argument_group("parallelism (data parallel size = world size / tp / ep for experts)")
    par.add_argument("--tp", type=int, default=1, help="tensor model parallel size")
    par.add_argument("--ep", type=int, default=1, help="expert model parallel size (with --experts)")
    par.add_argument("--distributed-optimizer", action="store_true")
    ckpt = p.add_argument_group("checkpoints (megatron dist_checkpointing)")
    ckpt.add_argument("--save", type=Path, help="checkpoint directory to write")
    ckpt.add_argument("--save-interval", type=int, default=0, help="also save every N steps")
    ckpt.add_argument("--load", type=Path, help="resume from a --save directory (its latest step) or a step directory")
    out = p.add_argument_group("output")
    out.add_argument("--log-file", type=Path, help="write one JSON line per step here (rank 0)")
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    out.add_argument("--verbose", action="store_true", help="show megatron-core's import-time notes too")
    args = p.parse_args(argv)
    if args.mla and args.spec == "local":
        # megatron-core's local spec puts MLA on DotProductAttention, which takes no k_channels.
        p.error("--mla needs --spec te (megatron-core's local spec cannot build multi-latent attention)")
    if (args.grouped_gemm or args.ep > 1) and not args.experts:
        p.error("--grouped-gemm and --ep are for MoE: give --experts N")
    return args


# --------------------------------------------------------------------------- set-up
def init_distributed(tp: int, ep: int = 1) -> torch.device:
    """One process per rank (torchrun sets RANK/WORLD_SIZE); a lone process is a world of one."""
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend=backend)
    else:
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, expert_model_parallel_size=ep)
    return device


def build_model(args: argparse.Namespace, device: torch.device) -> tuple[DistributedDataParallel, TransformerConfig]:
    dtype = DTYPES[args.precision]
    recompute: dict[str, Any] = {}
    if args.recompute:
        recompute = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    architecture: dict[str, Any] = {}
    if args.experts:
        architecture.update(
            num_moe_experts=args.experts,
            moe_router_topk=min(2, args.experts),
            moe_token_dispatcher_type="alltoall",
            moe_ffn_hidden_size=4 * args.hidden_size,
            moe_grouped_gemm=args.grouped_gemm,
            moe_aux_loss_coeff=1e-2,
            moe_permute_fusion=args.moe_fusion,
            moe_router_fusion=args.moe_fusion,
            expert_model_parallel_size=args.ep,
        )
    if args.mla:
        head = args.hidden_size // args.num_heads
        architecture.update(
            q_lora_rank=args.hidden_size // 2,
            kv_lora_rank=args.hidden_size // 2,
            qk_head_dim=head,
            qk_pos_emb_head_dim=head,
            v_head_dim=head,
            rope_type="yarn",
            rotary_scaling_factor=2.0,
            original_max_position_embeddings=args.seq_length // 2,
        )
    if args.swiglu:
        architecture.update(gated_linear_unit=True, activation_func=torch.nn.functional.silu)
    config = (MLATransformerConfig if args.mla else TransformerConfig)(
        normalization=args.normalization,
        apply_query_key_layer_scaling=args.apply_query_key_layer_scaling,
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        num_attention_heads=args.num_heads,
        hidden_dropout=args.dropout,
        attention_dropout=args.dropout,
        tensor_model_parallel_size=args.tp,
        use_cpu_initialization=True,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=args.precision == "bf16",
        fp16=args.precision == "fp16",
        **recompute,
        **architecture,
    )
    spec_of = get_gpt_layer_with_transformer_engine_spec if args.spec == "te" else get_gpt_layer_local_spec
    spec = spec_of(
        num_experts=args.experts or None, moe_grouped_gemm=args.grouped_gemm, multi_latent_attention=args.mla
    )
    model: torch.nn.Module = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=args.vocab_size,
        max_sequence_length=args.seq_length,
        position_embedding_type="rope",  # (with MLA, megatron's attention brings its own YaRN rotary embedding)
    )
    model.to(device)
    if args.precision != "fp32":
        model = Float16Module(config, model)
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=args.distributed_optimizer
    )
    return DistributedDataParallel(config=config, ddp_config=ddp_config, module=model), config


def null_tokenizer(vocab_size: int) -> object:
    """megatron-core's null tokenizer whose ids (end-of-document included) are all < ``vocab_size``.

    Releases differ: up to 0.18 its end-of-document id is ``vocab_size`` (one more id than
    asked for, which the model's embedding would not have), from 0.19 on ``vocab_size - 1``.
    """
    tokenizer = MegatronTokenizer.from_pretrained(metadata_path={"library": "null-text"}, vocab_size=vocab_size)
    extra = int(tokenizer.vocab_size) - vocab_size
    if extra > 0:
        tokenizer = MegatronTokenizer.from_pretrained(
            metadata_path={"library": "null-text"}, vocab_size=vocab_size - extra
        )
    return tokenizer


def build_dataset(args: argparse.Namespace) -> MockGPTDataset:
    samples = (
        (args.steps + 1) * args.micro_batch_size * args.num_microbatches * parallel_state.get_data_parallel_world_size()
    )
    config = GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        tokenizer=null_tokenizer(args.vocab_size),
        mid_level_dataset_surplus=0.005,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(MockGPTDataset, [samples, 0, 0], lambda: True, config).build()
    return train


def micro_batches(
    dataset: MockGPTDataset, args: argparse.Namespace, first_step: int, device: torch.device
) -> Iterator[dict[str, torch.Tensor]]:
    """Micro-batches in a fixed order, so that a resumed run sees what the original run would have."""
    dp_rank = parallel_state.get_data_parallel_rank()
    dp_size = parallel_state.get_data_parallel_world_size()
    mbs = args.micro_batch_size
    per_step = mbs * args.num_microbatches * dp_size
    step = first_step
    while True:
        for micro in range(args.num_microbatches):
            start = step * per_step + (micro * dp_size + dp_rank) * mbs
            samples = [dataset[i] for i in range(start, start + mbs)]
            batch = torch.utils.data.default_collate(samples)
            yield {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
        step += 1


def loss_func(loss_mask: torch.Tensor, output_tensor: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    losses = output_tensor.float().view(-1)
    mask = loss_mask.float().view(-1)
    loss = torch.sum(losses * mask) / mask.sum()
    # (the schedule divides the returned loss in place: report a copy)
    return loss, {"lm loss": loss.detach().clone()}


def forward_step(data_iterator: Iterator[dict[str, torch.Tensor]], model: torch.nn.Module) -> tuple[torch.Tensor, Any]:
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
    return output, partial(loss_func, batch["loss_mask"])


# --------------------------------------------------------------------------- checkpoints
def checkpoint_state(
    model: DistributedDataParallel,
    optimizer: Any,
    scheduler: OptimizerParamScheduler,
    step: int,
    *,
    is_loading: bool,
) -> dict[str, Any]:
    model_state = model.module.sharded_state_dict()
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    rng = {
        "cpu": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
        "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(),
    }
    return {
        "model": model_state,
        "optimizer": optimizer.sharded_state_dict(
            model_state,
            is_loading=is_loading,
            # the distributed optimizer's format (the default one is deprecated and refused)
            metadata={"distrib_optim_sharding_type": "dp_reshardable"},
        ),
        "scheduler": scheduler.state_dict(),
        "step": step,
        # Each tensor-parallel rank has its own RNG streams; data-parallel ranks are replicas.
        "rng": ShardedObject(
            "rng_state", rng, (tp_size,), (tp_rank,), replica_id=parallel_state.get_data_parallel_rank()
        ),
    }


def save_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any, step: int) -> None:
    target = path / f"step_{step:06d}"
    if dist.get_rank() == 0:
        target.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    dist_checkpointing.save(checkpoint_state(model, optimizer, scheduler, step, is_loading=False), str(target))
    if dist.get_rank() == 0:
        (path / "latest").write_text(target.name)
    dist.barrier()


def load_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any) -> int:
    # A directory written by --save (resume from its latest step), or one step's directory.
    target = path / (path / "latest").read_text().strip() if (path / "latest").exists() else path
    state = dist_checkpointing.load(checkpoint_state(model, optimizer, scheduler, 0, is_loading=True), str(target))
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    rng = state["rng"]
    torch.set_rng_state(rng["cpu"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(rng["cuda"])
    tensor_parallel.get_cuda_rng_tracker().set_states(rng["tracker"])
    return int(state["step"])


# --------------------------------------------------------------------------- progress
def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Progress:
    """The progress line on stderr: step, loss, the run's mean tokens/s, elapsed time and ETA.

    In a terminal, drawn by tqdm when it is installed (the ``train`` and ``test`` extras have
    it), else redrawn by hand; in a log (stderr not a terminal), a line per step. The same text either way,
    so that the last line reads ``step 30/30  loss 2.1071  13,786 tokens/s  0:05 elapsed,
    0:00 left``. tokens/s is the mean over the steps run so far (their tokens / their time,
    checkpoints not counted), not one step's: single steps vary tenfold on a shared CPU. The
    time left is the wall time per step so far (checkpoints counted) times the steps left.
    """

    def __init__(self, first: int, last: int, tokens_per_step: int, enabled: bool) -> None:
        self.first, self.last, self.tokens_per_step, self.enabled = first, last, tokens_per_step, enabled
        self.start = time.perf_counter()
        self.step_seconds = 0.0
        self.tty = sys.stderr.isatty()
        self.bar: Any = None
        if enabled and self.tty:  # in a log, a plain line per step reads better than tqdm's redraws
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(
                    total=last - first, file=sys.stderr, bar_format="[{bar:24}] {desc}", ascii=" #", dynamic_ncols=False
                )

    def text(self, step: int, loss: float, note: str = "") -> str:
        elapsed = time.perf_counter() - self.start
        done = step - self.first
        tokens_per_s = done * self.tokens_per_step / self.step_seconds if self.step_seconds > 0 else 0.0
        left = elapsed / done * (self.last - step) if done else 0.0
        return (
            f"step {step}/{self.last}  loss {loss:.4f}  {tokens_per_s:,.0f} tokens/s  "
            f"{_clock(elapsed)} elapsed, {_clock(left)} left{note}"
        )

    def update(self, step: int, loss: float, seconds: float, note: str = "") -> None:
        """Step ``step`` took ``seconds`` (its forward, backward and update: not a checkpoint saved after it)."""
        self.step_seconds += seconds
        if not self.enabled:
            return
        line = self.text(step, loss, note)
        if self.bar is not None:
            self.bar.set_description_str(line, refresh=False)
            self.bar.update(1)
            if step == self.last:
                self.bar.close()
            return
        width = 24
        fraction = (step - self.first) / max(1, self.last - self.first)
        bar = "#" * round(fraction * width) + "." * (width - round(fraction * width))
        if self.tty:
            end = "\n" if step == self.last else ""
            sys.stderr.write(f"\r[{bar}] {line}\033[K{end}")
        else:
            sys.stderr.write(f"[{bar}] {line}\n")
        sys.stderr.flush()


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = init_distributed(args.tp, args.ep)
    rank0 = dist.get_rank() == 0
    tensor_parallel.model_parallel_cuda_manual_seed(args.seed)

    model, config = build_model(args, device)
    optimizer = get_megatron_optimizer(
        OptimizerConfig(
            optimizer="adam",
            lr=args.lr,
            min_lr=args.lr / 10,
            weight_decay=0.01,
            clip_grad=1.0,
            bf16=args.precision == "bf16",
            fp16=args.precision == "fp16",
            params_dtype=DTYPES[args.precision],
            use_distributed_optimizer=args.distributed_optimizer,
            initial_loss_scale=args.initial_loss_scale,
        ),
        [model],
    )
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=0.0,
        max_lr=args.lr,
        min_lr=args.lr / 10,
        # Megatron's scheduler needs warm-up < decay steps: a run shorter than its warm-up warms up for all but
        # its last step (``--steps 1``: none).
        lr_warmup_steps=min(args.warmup_steps, args.steps - 1),
        lr_decay_steps=args.steps,
        lr_decay_style="cosine",
        start_wd=0.01,
        end_wd=0.01,
        wd_incr_steps=args.steps,
        wd_incr_style="constant",
    )
    # What megatron's training loop wires up: gradient all-reduce, loss scaling, no_sync.
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
    config.no_sync_func = model.no_sync

    step = load_checkpoint(args.load, model, optimizer, scheduler) if args.load else 0
    dataset = build_dataset(args)
    data = micro_batches(dataset, args, step, device)
    forward_backward = get_forward_backward_func()
    dp_group = parallel_state.get_data_parallel_group()
    tokens_per_step = args.micro_batch_size * args.num_microbatches * args.seq_length * dist.get_world_size() // args.tp

    log = args.log_file.open("w") if (args.log_file and rank0) else None
    if rank0 and not args.quiet:
        where = f"{dist.get_world_size()} process(es), tp={args.tp}, dp={parallel_state.get_data_parallel_world_size()}"
        print(f"training GPT on {device.type} ({where}), {args.precision}, from step {step}", file=sys.stderr)
    progress = Progress(step, args.steps, tokens_per_step, enabled=rank0 and not args.quiet)
    while step < args.steps:
        start = time.perf_counter()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(
            forward_step_func=forward_step,
            data_iterator=data,
            model=[model],
            num_microbatches=args.num_microbatches,
            seq_length=args.seq_length,
            micro_batch_size=args.micro_batch_size,
            forward_only=False,
        )
        updated, grad_norm, _ = optimizer.step()
        if updated:
            scheduler.step(increment=1)
        step += 1
        loss = torch.stack([item["lm loss"] for item in losses]).mean()
        dist.all_reduce(loss, group=dp_group)
        loss = loss.item() / parallel_state.get_data_parallel_world_size()
        elapsed = time.perf_counter() - start
        note = "" if updated else "  (update skipped: inf/nan gradients)"
        progress.update(step, loss, elapsed, note)
        if log is not None:
            record = {
                "step": step,
                "loss": loss,
                "lr": optimizer.param_groups[0]["lr"],
                "loss_scale": float(optimizer.get_loss_scale()),
                "updated": bool(updated),
                "grad_norm": None if grad_norm is None else float(grad_norm),
                "tokens_per_s": tokens_per_step / elapsed,
            }
            log.write(json.dumps(record) + "\n")
            log.flush()
        if args.save and (step == args.steps or (args.save_interval and step % args.save_interval == 0)):
            save_checkpoint(args.save, model, optimizer, scheduler, step)
    if log is not None:
        log.close()
    dist.barrier()
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
