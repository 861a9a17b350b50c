"""Which memory-only ops a megatron GPT training step runs besides the pack's kernels, and who calls them.

Why: in an H200 profile of the 1.31B step (docs/gpu_pack.md, "Gradient accumulation fusion
without Apex"), copies and element-wise additions were about 5% of the kernel time, with no
source named. The call graph of a step does not depend on the device, so it can be read here: the
same megatron-core, the same pack (its kernels in Triton's interpreter), a small model.

How: a ``TorchDispatchMode`` over one step (forward, backward, optimizer) records each aten op
that only moves or adds memory (copies, additions, concatenations, fills, casts) with its caller:
the innermost megatron or fl_patch frame, and in backward the autograd node running it. Ops
inside Triton's interpreter are not counted (on a GPU they are one kernel). Counts are per step;
divide by layers x micro-batches for "per layer and micro-batch".

Run (the pack's kernels need Triton's interpreter here; scripts/triton-cpu.sh installs it)::

    PYTHONPATH=.cache/triton-cpu:src TRITON_INTERPRET=1 MG_FL_PREFER=flaggems \\
        .venv/bin/python bench/step_op_census.py [--fused-qkv-rope] [--no-grad-accum-fusion]
"""

from __future__ import annotations

import argparse
import collections
import os
import socket
import traceback

import fl_patch

fl_patch.install()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

MEMORY_OPS = {
    "copy_", "clone", "_to_copy", "cat", "stack", "add", "add_", "fill_", "zero_", "zeros_like", "new_zeros",
}  # fmt: skip


class Census(TorchDispatchMode):
    """Counts memory-only aten ops by (op, caller, input shapes)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[tuple[str, str, str]] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name not in MEMORY_OPS:
            return out
        stack = traceback.extract_stack()
        if any("triton" in frame.filename for frame in stack):
            return out  # the interpreter running one of the pack's kernels
        ours = [
            f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
            for f in stack
            if ("megatron" in f.filename or "fl_patch" in f.filename) and "step_op_census" not in f.filename
        ]
        node = torch._C._current_autograd_node()
        caller = (ours[-1] if ours else "?") + (f" [{node.name()}]" if node is not None else "")
        shapes = str([tuple(a.shape) for a in args if isinstance(a, torch.Tensor)][:2])
        self.counts[(name, caller, shapes)] += 1
        return out


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--microbatches", type=int, default=2)
    parser.add_argument("--fused-qkv-rope", action="store_true", help="TransformerConfig(fused_single_qkv_rope=True)")
    parser.add_argument("--no-grad-accum-fusion", action="store_true")
    args = parser.parse_args()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=_free_port())
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(1, 1)
    torch.manual_seed(0)
    model_parallel_cuda_manual_seed(0)
    seq, mbs, vocab = 64, 2, 512
    # gems_gpt.py's llama131 settings, small: GQA, SwiGLU, RMSNorm, no biases, bf16, no dropout
    cfg = TransformerConfig(
        num_layers=args.layers, hidden_size=128, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=352,
        normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
        bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16, bias_activation_fusion=False,
        masked_softmax_fusion=False, apply_rope_fusion=False, bias_dropout_fusion=False,
        gradient_accumulation_fusion=not args.no_grad_accum_fusion, attention_dropout=0.0, hidden_dropout=0.0,
        fused_single_qkv_rope=args.fused_qkv_rope, use_cpu_initialization=True,
    )  # fmt: skip
    spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    model = GPTModel(
        config=cfg, transformer_layer_spec=spec, vocab_size=vocab, max_sequence_length=seq,
        position_embedding_type="rope",
    )  # fmt: skip
    model = DistributedDataParallel(
        config=cfg, module=Float16Module(cfg, model), ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True)
    )
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True, params_dtype=torch.bfloat16, clip_grad=1.0), [model]
    )
    tokens = torch.randint(0, vocab, (mbs, seq + 1))
    positions = torch.arange(seq).expand(mbs, -1)

    def step_fn(iterator, m):  # type: ignore[no-untyped-def]
        batch = next(iterator)
        out = m(batch[:, :-1], positions, None, labels=batch[:, 1:])
        return out, lambda o: (o.float().mean(), {})

    forward_backward = get_forward_backward_func()

    def step() -> None:
        model.zero_grad_buffer()
        optimizer.zero_grad()
        forward_backward(
            forward_step_func=step_fn, data_iterator=iter([tokens] * args.microbatches), model=[model],
            num_microbatches=args.microbatches, seq_length=seq, micro_batch_size=mbs, forward_only=False,
        )  # fmt: skip
        optimizer.step()

    step()  # the first step builds what later steps reuse
    census = Census()
    with census:
        step()
    per = args.layers * args.microbatches
    print(f"memory-only ops of one step: {args.layers} layers x {args.microbatches} micro-batches ({per})")
    print(f"fused_single_qkv_rope={args.fused_qkv_rope} gradient_accumulation_fusion={not args.no_grad_accum_fusion}")
    for (name, caller, shapes), n in sorted(census.counts.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"{n:4d} ({n / per:4.1f}/layer-mb) {name:10s} {shapes:34s} {caller}")


if __name__ == "__main__":
    main()
