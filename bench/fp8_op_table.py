"""The fp8 GEMMs of megatron's TE-spec GPT, call by call, against float64 and against bf16's own error (issue 48).

``MG_FL_PREFER=flaggems python -m fl_patch bench/fp8_op_table.py [--format hybrid --recipe tensorwise] [--json t.json]``

fl_patch's compare mode (docs/compare.md) checks a patch against the upstream code it replaces; the fp8 linears have
none here (upstream's are Transformer Engine's, not installed), so this is their table instead. One training step of
a small Llama-style GPT (megatron's TE layer spec, the FlagGems pack's fp8 on its TE-compatible linears) records the
first call of every fp8 linear (its input, weight and, in backward, its output gradient), then multiplies those same
operands three ways, forward (``x @ w.T``), dgrad (``dy @ w``) and wgrad (``dy.T @ x``):

- in float64: the reference;
- on the fp8 path (a fresh ``LinearFp8`` of the run's recipe: the pack's casts and ``torch._scaled_mm``); its forward
  is checked equal to what the model's call returned, so the table is about the calls that ran (``delayed``: not
  checked, the model's layer scaled from its own history);
- in bf16 (``F.linear`` and autograd): what the same GEMMs lose without fp8.

Each error is the relative Frobenius error against float64. The bound is the one the fp8 tests state
(``tests/impls/test_flaggems_fp8.py``, ``BOUND``): 4.5% for e4m3 operands, 7% where the output gradient is e5m2 (``hybrid``
dgrad and wgrad), the formats' rounding on Gaussian data (3.8% and 5.9% measured) with 20% to spare. On a CPU the
casts run in torch (the kernels' bytes are the same: their tests), on a GPU on the pack's kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any

import fl_patch

fl_patch.install()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BOUND = {torch.float8_e4m3fn: 0.045, torch.float8_e5m2: 0.07}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()


class _Module:
    is_first_microbatch: bool | None = None


def _build(args: argparse.Namespace, device: str) -> Any:  # (megatron's GPTModel: untyped)
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    port = args.port
    if not port:  # a free port of this machine (the process group's store listens on it)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    torch.manual_seed(1)
    model_parallel_cuda_manual_seed(1)
    config = TransformerConfig(
        num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
        num_query_groups=args.heads // 2, ffn_hidden_size=args.ffn, normalization="RMSNorm", gated_linear_unit=True,
        activation_func=F.silu, add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0,
        bias_activation_fusion=False, apply_rope_fusion=False, bf16=True, params_dtype=torch.bfloat16,
        use_cpu_initialization=device == "cpu", fp8=args.format, fp8_recipe=args.recipe,
    )  # fmt: skip
    model = GPTModel(
        config=config, transformer_layer_spec=get_gpt_layer_with_transformer_engine_spec(), vocab_size=args.vocab,
        max_sequence_length=args.seq, position_embedding_type="rope",
    )  # fmt: skip
    return model.to(device=device, dtype=torch.bfloat16)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", choices=("hybrid", "e4m3"), default="hybrid")
    parser.add_argument("--recipe", choices=("tensorwise", "delayed", "blockwise"), default="tensorwise")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=768)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--port", type=int, default=0, help="the process group's port (0: a free one)")
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args(argv)
    from fl_patch.impls.flaggems import fp8

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = _build(args, device)
    names = {id(module): name for name, module in model.named_modules()}
    calls: list[dict] = []
    seen: set[str] = set()
    linear = fp8.LinearFp8.linear

    def recording(
        self: fp8.LinearFp8, module: object, input: torch.Tensor, weight: torch.Tensor, **kw: object
    ) -> torch.Tensor:
        out = linear(self, module, input, weight, **kw)  # type: ignore[arg-type]
        name = names.get(id(module), "?")
        if name not in seen and out.requires_grad:
            seen.add(name)
            entry = {"name": name, "x": input.detach().clone(), "w": weight.detach().clone(), "y": out.detach().clone()}
            out.register_hook(lambda dy, entry=entry: entry.__setitem__("dy", dy.detach().clone()))
            calls.append(entry)
        return out

    fp8.LinearFp8.linear = recording  # type: ignore[method-assign]  # (this bench's own wrapper, for one step)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g).to(device)
    positions = torch.arange(args.seq, device=device).expand(args.batch, args.seq)
    loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
    loss.backward()
    fp8.LinearFp8.linear = linear  # type: ignore[method-assign]

    recipe = fp8.Recipe(format=args.format, kind=args.recipe)
    bounds = {"forward": BOUND[recipe.fwd_dtype], "dgrad": BOUND[recipe.bwd_dtype], "wgrad": BOUND[recipe.bwd_dtype]}
    rows = []
    for entry in calls:
        x = entry["x"].reshape(-1, entry["x"].shape[-1])
        w, dy = entry["w"], entry["dy"].reshape(-1, entry["dy"].shape[-1])
        X, W, DY = x.double(), w.double(), dy.double()
        want = {"forward": X @ W.t(), "dgrad": DY @ W, "wgrad": DY.t() @ X}
        layer = fp8.LinearFp8(recipe)
        for _ in range(3 if args.recipe == "delayed" else 1):  # delayed: a history to scale from, as the tests do
            xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
            with fp8.Autocast(recipe):
                y8 = layer.linear(_Module(), xx, ww)
            y8.backward(dy)
        got8 = {"forward": y8, "dgrad": xx.grad, "wgrad": ww.grad}
        xb, wb = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        yb = F.linear(xb, wb)
        yb.backward(dy)
        got16 = {"forward": yb, "dgrad": xb.grad, "wgrad": wb.grad}
        row: dict[str, object] = {"linear": entry["name"], "shape": [x.shape[0], x.shape[1], w.shape[0]]}
        for gemm in ("forward", "dgrad", "wgrad"):
            e8, e16 = _rel(got8[gemm], want[gemm]), _rel(got16[gemm], want[gemm])  # type: ignore[arg-type]
            row[gemm] = {"fp8": e8, "bf16": e16, "within": e8 <= bounds[gemm]}
        row["same_as_the_call"] = (
            None if args.recipe == "delayed" else bool(torch.equal(y8.reshape(entry["y"].shape), entry["y"]))
        )
        rows.append(row)
    table = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "recipe": args.recipe,
        "format": args.format,
        "bounds": bounds,
        "rows": rows,
        "within": all(r[g]["within"] for r in rows for g in ("forward", "dgrad", "wgrad")),  # type: ignore[index]
        "fp8_calls": fp8.fp8_summary()["fp8_gemm_calls"],
    }
    print(f"fp8 {args.recipe} ({args.format}) on {table['device']}: relative error against float64 (bf16's own)")
    print(f"{'linear':<46} {'forward':>17} {'dgrad':>17} {'wgrad':>17}  same as the call")
    for row in rows:
        cells = [
            f"{row[g]['fp8']:.2%} ({row[g]['bf16']:.2%}){'' if row[g]['within'] else '!'}"
            for g in ("forward", "dgrad", "wgrad")
        ]  # type: ignore[index]
        print(f"{row['linear']:<46} {cells[0]:>17} {cells[1]:>17} {cells[2]:>17}  {row['same_as_the_call']}")
    bound_text = ", ".join(f"{k} {v:.1%}" for k, v in bounds.items())
    print(f"{len(rows)} linears; every error within its bound ({bound_text}): {table['within']} ('!': over it)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    torch.distributed.destroy_process_group()
    return 0 if table["within"] and all(r["same_as_the_call"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
