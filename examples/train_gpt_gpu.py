"""Train a Llama-style GPT on one Hopper GPU at the FlagGems pack's best settings, in bf16 or fp8 (no Transformer Engine).

The settings behind docs/gpu_pack.md's MFU figures, as a script a user copies. Run it under fl_patch with the pack::

    MG_FL_PREFER=flaggems python -m fl_patch examples/train_gpt_gpu.py                     # bf16
    MG_FL_PREFER=flaggems python -m fl_patch examples/train_gpt_gpu.py --fp8 hybrid        # fp8, tensorwise scaling
    MG_FL_PREFER=flaggems python -m fl_patch examples/train_gpt_gpu.py --fp8 e4m3 --fp8-recipe blockwise

What makes it fast, each a line below marked ``# (n)``:
 1. megatron's full-iteration CUDA graph (``FullCudaGraphWrapper``: Megatron-LM's ``--cuda-graph-impl
    full_iteration``): forward and backward of every micro-batch captured once, after warm-up steps, then replayed;
    the pack's small kernels stop costing host time;
 2. everything on megatron's shared capture stream from *before* the model is built: autograd runs a parameter's
    gradient accumulation on the stream current when its node was made (megatron's DDP makes them at construction),
    and on torch without ``set_override_stale_capture_stream`` (2.11) a backward waiting on the default stream
    invalidates the capture;
 3. megatron's graph-safe RNG (``use_cudagraphable_rng=True``): a graph replays only registered generators;
 4. ``gradient_accumulation_fusion=True`` (Megatron-LM's default; served by fl_patch without Apex): the weight
    gradient added into the fp32 ``main_grad`` by the GEMM;
 5. ``fused_single_qkv_rope=True``: query and key rotated from the unsplit QKV projection in one launch (the pack's
    kernel; megatron refuses it without TE, the pack serves it);
 6. several micro-batches a step (gradient accumulation), large micro-batches (8 x 4096 tokens for the 1.3B);
 7. the garbage collector frozen after the build (Megatron-LM's ``--manual-gc``);
 8. fp8 (optional): the TE layer spec's linears run their GEMMs in fp8 (``config.fp8``, ``fp8_recipe``: megatron's own
    options; without TE the pack's ``fp8.py`` serves them), which needs the TE spec (``get_gpt_layer_with_
    transformer_engine_spec``; the local spec's linears stay bf16 and the pack refuses fp8 there).
The batches must be dicts of tensors (the graph wrapper copies each into static buffers).
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import time

import torch
import torch.nn.functional as F


def init_one_gpu() -> None:
    """A one-rank NCCL group (torchrun's, where it set one up)."""
    if "WORLD_SIZE" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.distributed.init_process_group("nccl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=25)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=5632)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--mbs", type=int, default=8, help="micro-batch size")
    parser.add_argument("--microbatches", type=int, default=4, help="micro-batches a step")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--fp8", choices=("e4m3", "hybrid"), default=None)
    parser.add_argument("--fp8-recipe", choices=("tensorwise", "delayed", "blockwise"), default="tensorwise")
    parser.add_argument("--no-cuda-graph", action="store_true", help="eager steps (to compare)")
    args = parser.parse_args()

    init_one_gpu()
    graph = not args.no_cuda_graph
    from megatron.core import parallel_state
    from megatron.core.full_cuda_graph import FullCudaGraphWrapper, get_shared_capture_stream

    if graph:  # (2) the capture stream, current from before the model is built
        stream = get_shared_capture_stream()
        stream.wait_stream(torch.cuda.current_stream())
        torch.cuda.set_stream(stream)
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(1, 1)
    torch.manual_seed(1234)
    model_parallel_cuda_manual_seed(1234, use_cudagraphable_rng=graph)  # (3)
    fp8 = {"fp8": args.fp8, "fp8_recipe": args.fp8_recipe} if args.fp8 else {}  # (8)
    config = TransformerConfig(
        num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
        num_query_groups=args.groups, ffn_hidden_size=args.ffn, normalization="RMSNorm", gated_linear_unit=True,
        activation_func=F.silu, add_bias_linear=False, bf16=True, params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16, attention_dropout=0.0, hidden_dropout=0.0, bias_dropout_fusion=False,
        apply_rope_fusion=False, masked_softmax_fusion=False,
        gradient_accumulation_fusion=True,  # (4)
        fused_single_qkv_rope=True,  # (5)
        **fp8,
    )  # fmt: skip
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_with_transformer_engine_spec(),  # (8) TE spec: fp8 runs in its linears
        vocab_size=args.vocab,
        max_sequence_length=args.seq,
        position_embedding_type="rope",
    ).cuda()
    model = Float16Module(config, model)
    model = DistributedDataParallel(
        config=config, module=model, ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True)
    )
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=3e-4, bf16=True, params_dtype=torch.bfloat16, clip_grad=1.0), [model]
    )
    positions = torch.arange(args.seq, device="cuda").expand(args.mbs, -1)

    def batches():
        generator = torch.Generator(device="cuda").manual_seed(7)
        while True:  # random tokens stand in for a dataset here; a real loader yields the same dicts
            yield {"tokens": torch.randint(0, args.vocab, (args.mbs, args.seq + 1), device="cuda", generator=generator)}

    def forward_step(iterator, m):
        tokens = next(iterator)["tokens"]
        output = m(tokens[:, :-1], positions, None, labels=tokens[:, 1:])

        def loss(o: torch.Tensor):
            value = o.float().mean()
            return value, {"lm loss": value}

        return output, loss

    forward_backward = get_forward_backward_func()
    if graph:  # (1) captured at the 4th step, replayed from the 5th
        forward_backward = FullCudaGraphWrapper(forward_backward, cuda_graph_warmup_steps=3)
    gc.collect()  # (7)
    gc.freeze()
    gc.disable()
    data = batches()
    for step in range(1, args.steps + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(
            forward_step_func=forward_step, data_iterator=data, model=model, num_microbatches=args.microbatches,
            seq_length=args.seq, micro_batch_size=args.mbs, decoder_seq_length=args.seq, forward_only=False,
        )  # fmt: skip
        optimizer.step()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        loss = sum(r["lm loss"].item() for r in losses) / len(losses)
        print(f"step {step:3d}  loss {loss:.4f}  {elapsed:.3f} s", flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
