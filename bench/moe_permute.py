"""megatron's MoE token movement with ``fused=True`` (fl_patch's, the pack's kernels on a GPU) and ``fused=False``.

One process, the alltoall dispatcher's sequence at EP=1 as megatron runs it for a layer: ``permute`` (with the
routing probabilities), ``sort_chunks_by_idxs`` to local-expert order, the same back, ``unpermute``;
forward and backward, bf16 rows, fp32 probabilities. Each variant is timed over ``--iters`` iterations
(alternating variants, medians): wall time per iteration with a synchronize (what a host-bound step pays),
and GPU time by CUDA events. Run under fl_patch so ``fused=True`` reaches fl_patch's functions::

    MG_FL_PREFER=flaggems python -m fl_patch bench/moe_permute.py --json out.json          # on a GPU
    python -m fl_patch bench/moe_permute.py --device cpu --iters 5                          # torch forms, CPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch


def _routing(tokens: int, experts: int, topk: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    scores = torch.rand(tokens, experts, generator=gen).to(device)
    top = scores.topk(topk, dim=1)
    mask = torch.zeros(tokens, experts, dtype=torch.bool, device=device).scatter(1, top.indices, True)
    probs = torch.zeros(tokens, experts, device=device).scatter(1, top.indices, top.values)
    return mask, probs


def _layer(moe_utils, x, mask, probs, n_out: int, sizes, order, fused: bool) -> torch.Tensor:
    rows, row_probs, mapping = moe_utils.permute(x, mask, probs=probs, num_out_tokens=n_out, fused=fused)[:3]
    rows, row_probs = moe_utils.sort_chunks_by_idxs(rows, sizes, order, probs=row_probs, fused=fused)
    rows = rows * row_probs.unsqueeze(-1).to(rows.dtype)  # the experts' weighted output stands in here
    rows, _ = moe_utils.sort_chunks_by_idxs(rows, sizes, order, fused=fused)  # identity order: its own inverse
    return moe_utils.unpermute(rows, mapping, restore_shape=x.shape, routing_map=mask, fused=fused)


def measure(tokens: int, experts: int, topk: int, hidden: int, device: str, iters: int) -> dict[str, object]:
    from megatron.core.transformer.moe import moe_utils

    mask, probs0 = _routing(tokens, experts, topk, device)
    x0 = torch.randn(tokens, hidden, device=device).to(torch.bfloat16)
    grad = torch.randn(tokens, hidden, device=device).to(torch.bfloat16)
    counts = mask.sum(0)
    # at EP=1 the dispatcher's split sizes are the per-expert counts, its orders the identity (device tensors with
    # the fusion; the unfused path reads them on the host)
    order = torch.arange(experts, device=device)
    host = {"sizes": counts.cpu(), "order": order.cpu()}
    dev = {"sizes": counts, "order": order}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times: dict[bool, list[float]] = {True: [], False: []}
    gpu: dict[bool, list[float]] = {True: [], False: []}
    outs: dict[bool, torch.Tensor] = {}
    for i in range(iters + 3):
        for fused in (True, False):
            where = dev if fused else host
            x = x0.clone().requires_grad_(True)
            probs = probs0.clone().requires_grad_(True)
            sync()
            start = time.perf_counter()
            if device == "cuda":
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
            out = _layer(moe_utils, x, mask, probs, tokens * topk, where["sizes"], where["order"], fused)
            out.backward(grad)
            if device == "cuda":
                end.record()
            sync()
            if i >= 3:
                times[fused].append(time.perf_counter() - start)
                if device == "cuda":
                    gpu[fused].append(begin.elapsed_time(end) / 1e3)
            outs[fused] = torch.cat([out.detach().float().flatten(), x.grad.float().flatten(), probs.grad.flatten()])
    diff = ((outs[True] - outs[False]).norm() / outs[False].norm()).item()
    result: dict[str, object] = {
        "shape": {"tokens": tokens, "experts": experts, "topk": topk, "hidden": hidden},
        "fused_ms": statistics.median(times[True]) * 1e3,
        "unfused_ms": statistics.median(times[False]) * 1e3,
        "relative_difference": diff,
    }
    if device == "cuda":
        result["fused_gpu_ms"] = statistics.median(gpu[True]) * 1e3
        result["unfused_gpu_ms"] = statistics.median(gpu[False]) * 1e3
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--json", default=None)
    parser.add_argument("--profile", action="store_true", help="print the GPU kernels of the first shape, fused")
    args = parser.parse_args()
    shapes = [(4096, 8, 2, 2048), (4096, 64, 8, 2048), (16384, 64, 6, 4096)]
    if args.device == "cpu":
        shapes = [(512, 8, 2, 256), (512, 64, 8, 256)]
    if args.profile and args.device == "cuda":
        from torch.profiler import ProfilerActivity, profile

        measure(*shapes[0], device=args.device, iters=2)  # compiled and warm
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            measure(*shapes[0], device=args.device, iters=5)
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=25, max_name_column_width=70))
    results = []
    for shape in shapes:
        r = measure(*shape, device=args.device, iters=args.iters)
        results.append(r)
        print(json.dumps(r), flush=True)
    if args.json:
        from fl_patch.impls.flaggems._runtime import FALLBACKS

        fallbacks = {f"{op}: {why}": n for (op, why), n in FALLBACKS.items()}
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "vendor": os.environ.get("MG_FL_PREFER"), "results": results,
                       "fallbacks": fallbacks}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
