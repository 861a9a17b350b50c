"""The fp8 pieces on one GPU, at the 1.31B and 2.81B Llama-style models' shapes: what an fp8 linear costs against bf16.

``python3 bench/gpu_fp8_ops.py --out fp8_ops.json`` (on the GPU machine). For the four linears of a layer (qkv,
proj, fc1, fc2) at 32,768 tokens (8 sequences of 4096, one micro-batch of the MFU runs):

- ``gemm``: one GEMM's TFLOP/s, bf16 (cuBLAS through torch) against fp8 per-tensor scaled (``torch._scaled_mm``,
  fast accumulation as the forward uses it, and split accumulation as dgrad/wgrad use it) and block scaled (1x128 by
  128x128), on the forward's shape;
- ``cast``: the pack's cast kernels (per-tensor: amax, then one pass writing the fp8 copy and its transpose; delayed:
  one pass; 1x128 with the transposed 128x1 copy: one pass) in TB/s of the bytes they must move (read bf16, write two
  fp8 copies), against torch's cast and transpose;
- ``linear``: a whole linear, forward and backward (fp32 ``main_grad`` accumulation, as megatron's
  ``gradient_accumulation_fusion``), the pack's fp8 path per recipe against bf16 (``F.linear`` forward, dgrad and a
  wgrad ``addmm`` into ``main_grad``): the speed-up a layer's GEMMs can give, casts included.

Medians of CUDA-event timings (``--repeat``). ``--dry-run`` runs every path once on a CPU at small shapes
(``TRITON_INTERPRET=1``, triton from ``.cache/triton-cpu`` on ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from fl_patch.impls.flaggems import fp8
from fl_patch.impls.flaggems import fp8_quant as fq

MODELS = {
    # name: (hidden, qkv out, ffn)
    "1.31B": (2048, (16 + 2 * 8) * 128, 5632),
    "2.81B": (3072, (24 + 2 * 8) * 128, 8192),
}


def layer_shapes(hidden: int, qkv: int, ffn: int) -> dict[str, tuple[int, int]]:
    """(in, out) features of a layer's four linears."""
    return {"qkv": (hidden, qkv), "proj": (hidden, hidden), "fc1": (hidden, 2 * ffn), "fc2": (ffn, hidden)}


def timed(fn: Callable[[], object], repeat: int, dry: bool, inner: int = 1) -> float:
    """Median milliseconds of ``fn`` (after two warm-up calls). ``inner``: calls back to back per timing (divided
    out), so the host's launch work overlaps the GPU's and a call's time is its kernels' (as under a CUDA graph)."""
    if dry:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()  # (queued ahead of the timed calls: the GPU is busy when begin is recorded)
        begin.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) / inner)
    times.sort()
    return times[len(times) // 2]


class _Module:
    is_first_microbatch: bool | None = None


def _inputs(row: dict, dev: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, k, n = row["m"], row["k"], row["n"]
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
    dy = torch.randn(m, n, device=dev, dtype=torch.bfloat16) * 1e-3
    return x, w, dy


def bench_gemm(row: dict, dev: str, repeat: int, dry: bool, blockwise: str | None) -> list[dict]:
    """One forward GEMM: bf16, fp8 per-tensor (fast and split accumulation), fp8 block-scaled."""
    x, w, _ = _inputs(row, dev)
    flops = 2 * row["m"] * row["k"] * row["n"]
    xq, _ = fq.quantize_tensorwise(x, fq.E4M3)
    wq, _ = fq.quantize_tensorwise(w, fq.E4M3)
    assert xq is not None and wq is not None
    entry = dict(row)
    entry["bf16_tflops"] = flops / timed(lambda: x @ w.t(), repeat, dry) / 1e9
    fast = timed(lambda: fq.scaled_mm(xq, wq.t(), torch.bfloat16, fast_accum=True), repeat, dry)
    entry["fp8_fast_tflops"] = flops / fast / 1e9
    entry["fp8_split_tflops"] = flops / timed(lambda: fq.scaled_mm(xq, wq.t(), torch.bfloat16), repeat, dry) / 1e9
    if blockwise is None:
        xb, _ = fq.quantize_1x128(x, fq.E4M3, transposed=False)
        wb, _ = fq.quantize_128x128(w, fq.E4M3)
        entry["fp8_block_tflops"] = flops / timed(lambda: fq.scaled_mm(xb, wb.t(), torch.bfloat16), repeat, dry) / 1e9
    return [entry]


def _torch_cast(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q = (t.float() * (448.0 / t.abs().amax().float())).clamp(-448, 448).to(fq.E4M3)
    return q, q.t().contiguous()


def bench_cast(row: dict, dev: str, repeat: int, dry: bool, blockwise: str | None) -> list[dict]:
    """The casts of a linear's input (x) and output gradient (dy): bytes moved over time."""
    x, _, dy = _inputs(row, dev)
    out = []
    for what, t in (("input", x), ("grad", dy)):
        moved = t.numel() * (2 + 1 + 1)  # read bf16, write the fp8 copy and its transpose
        entry = {**row, "tensor": what, "elements": t.numel()}
        scale, slot = torch.ones(1, device=dev), torch.zeros(1, device=dev)
        casts: dict[str, Callable[[], object]] = {
            "tensorwise": lambda t=t: fq.quantize_tensorwise(t, fq.E4M3, transposed=True),
            "delayed": lambda t=t, s=scale, a=slot: fq.quantize_delayed(t, fq.E4M3, s, a, transposed=True),
            "1x128": lambda t=t: fq.quantize_1x128(t, fq.E4M3, transposed=True),
            "torch": partial(_torch_cast, t),
        }
        for kind, fn in casts.items():
            ms = timed(fn, repeat, dry)
            entry[f"{kind}_ms"] = ms
            entry[f"{kind}_tbs"] = moved / ms / 1e9
        out.append(entry)
    return out


def bench_linear(row: dict, dev: str, repeat: int, dry: bool, blockwise: str | None) -> list[dict]:
    """A whole linear, forward and backward, the weight gradient accumulated into an fp32 main_grad."""
    x, w, dy = _inputs(row, dev)
    entry = dict(row)
    xx = x.detach().requires_grad_(True)
    ww = w.detach().requires_grad_(True)
    main_grad = torch.zeros(row["n"], row["k"], device=dev, dtype=torch.float32)
    ww.main_grad = main_grad  # type: ignore[attr-defined]

    def bf16_linear() -> None:
        # megatron's bf16 linear with gradient accumulation fusion: forward, dgrad, and the wgrad added into the
        # fp32 main_grad by the GEMM (fl_patch's wgrad_accumulation.py on CUDA)
        F.linear(x, w)
        _ = dy @ w
        if dry:
            main_grad.add_(dy.t().float() @ x.float())
        else:
            torch.addmm(main_grad, dy.t(), x, out_dtype=torch.float32, out=main_grad)

    entry["bf16_ms"] = timed(bf16_linear, repeat, dry)
    kinds = [("tensorwise", "hybrid"), ("delayed", "hybrid")]
    if blockwise is None:
        kinds.append(("blockwise", "e4m3"))
    for kind, fmt in kinds:
        layer = fp8.LinearFp8(fp8.Recipe(format=fmt, kind=kind))
        module = _Module()

        def fp8_linear(first: bool, layer: fp8.LinearFp8 = layer, module: _Module = module) -> None:
            # first: a new fp8 weight copy (a step's first micro-batch); else the copy reused (the others)
            module.is_first_microbatch = first
            with fp8.Autocast(layer.recipe):
                y = layer.linear(module, xx, ww, gradient_accumulation_fusion=True)
            y.backward(dy)

        entry[f"{kind}_ms"] = timed(lambda f=fp8_linear: f(True), repeat, dry)
        entry[f"{kind}_reused_ms"] = timed(lambda f=fp8_linear: f(False), repeat, dry)
        entry[f"{kind}_speedup"] = entry["bf16_ms"] / entry[f"{kind}_reused_ms"]
    return [entry]


SWEEP_TILES = [
    (32, 128, 4), (32, 256, 4), (64, 64, 4), (64, 128, 4), (64, 128, 8), (64, 256, 8), (128, 64, 4), (128, 64, 8),
    (128, 128, 4), (128, 128, 8), (128, 128, 16), (128, 256, 8), (128, 256, 16), (256, 128, 8), (256, 128, 16),
]  # fmt: skip


def _cast_bytes_right(dev: str) -> bool:
    """The current tile and conversion give torch's bytes (both formats, delayed and current scaling)."""
    x = torch.randn(1000, 3000, device=dev, dtype=torch.bfloat16) * torch.logspace(-6, 3, 3000, device=dev)
    for dtype in (fq.E4M3, fq.E5M2):
        scale = torch.full((1,), 0.7, device=dev)
        q, qt = fq.quantize_delayed(x, dtype, scale, torch.zeros(1, device=dev), transposed=True)
        want = (x.float() * 0.7).clamp(-fq.fp8_max(dtype), fq.fp8_max(dtype)).to(dtype)
        assert q is not None and qt is not None
        if not (torch.equal(q.data.view(torch.uint8), want.view(torch.uint8)) and torch.equal(qt.data, q.data.t())):
            return False
    return True


def sweep_cast(dev: str, repeat: int, dry: bool, tokens: int) -> tuple[list[dict], str]:
    """Time the per-tensor cast kernels (delayed: one pass; tensorwise: amax, then the cast; each writing the fp8
    copy and its transpose) for every candidate tile, with the GPU's fp8 conversion, and the current tile with the
    integer rounding too; on the 1.31B's qkv input, fc2 input and fc1 output gradient. Returns the rows and the
    fastest tile (``BLOCK_M,BLOCK_N,num_warps``) among those that give torch's bytes."""
    from fl_patch.impls.flaggems.kernels import fp8_cast

    hidden, _, ffn = MODELS["1.31B"] if not dry else (256, 384, 256)
    tensors = {
        "qkv input": torch.randn(tokens, hidden, device=dev, dtype=torch.bfloat16),
        "fc2 input": torch.randn(tokens, ffn, device=dev, dtype=torch.bfloat16),
        "fc1 grad": torch.randn(tokens, 2 * ffn, device=dev, dtype=torch.bfloat16) * 1e-3,
    }
    first = tuple(fp8_cast.TILE[k] for k in ("BLOCK_M", "BLOCK_N", "num_warps"))
    candidates = [(tile, True) for tile in SWEEP_TILES] + [(first, False)]
    rows: list[dict] = []
    for tile, hardware in candidates:
        fp8_cast.set_tile(*tile)
        fp8_cast.use_hardware_conversion(hardware)
        row: dict = {"tile": ",".join(map(str, tile)), "hardware_conversion": hardware}
        try:
            row["bytes_right"] = _cast_bytes_right(dev)
            total = 0.0
            for name, t in tensors.items():
                moved = t.numel() * 4  # read bf16, write the fp8 copy and its transpose
                scale, slot = torch.ones(1, device=dev), torch.zeros(1, device=dev)
                delayed = timed(
                    lambda t=t, s=scale, a=slot: fq.quantize_delayed(t, fq.E4M3, s, a, transposed=True), repeat, dry
                )
                current = timed(lambda t=t: fq.quantize_tensorwise(t, fq.E4M3, transposed=True), repeat, dry)
                row[f"{name} delayed_tbs"] = moved / delayed / 1e9
                row[f"{name} tensorwise_tbs"] = moved / current / 1e9
                total += delayed + current
            row["total_ms"] = total
        except Exception as exc:  # noqa: BLE001  (a tile that fails to compile or run is recorded, not fatal)
            row["error"] = repr(exc)[:300]
        rows.append(row)
        print("sweep", json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    fp8_cast.use_hardware_conversion(True)
    good = [r for r in rows if r.get("bytes_right") and r["hardware_conversion"] and "total_ms" in r]
    best = min(good, key=lambda r: r["total_ms"])["tile"] if good else ",".join(map(str, first))
    fp8_cast.set_tile(*map(int, best.split(",")))
    return rows, best


SWIGLU_TILES = [
    (64, 128, 4), (64, 128, 8), (32, 128, 4), (32, 128, 8), (64, 64, 4), (128, 64, 8), (32, 64, 4), (16, 128, 4),
    (128, 128, 8), (32, 256, 8),
]  # fmt: skip


def sweep_swiglu(dev: str, repeat: int, dry: bool, tokens: int) -> tuple[list[dict], str, str]:
    """The SwiGLU kernels that make the fp8 casts (``kernels/swiglu_fp8.py``) at every candidate tile, against the
    plain SwiGLU kernel followed by the cast kernels (what runs with ``FL_GEMS_FP8_SWIGLU_CAST=0``), forward (fc2's
    input) and backward (fc1's output gradient), current and delayed scaling, on the 1.31B's MLP at ``tokens``; each
    tile's results checked equal to the separate kernels' bit for bit. Returns the rows and the fastest forward and
    backward tiles among the correct ones."""
    from fl_patch.impls.flaggems.kernels import swiglu_fp8
    from fl_patch.impls.flaggems.kernels.swiglu import SwiGLUFunction

    ffn = MODELS["1.31B"][2] if not dry else 256
    y = (torch.randn(tokens, 2 * ffn, device=dev) * 2).to(torch.bfloat16).requires_grad_(True)
    dout = (torch.randn(tokens, ffn, device=dev) * 1e-3).to(torch.bfloat16)
    out = SwiGLUFunction.apply(y, None)
    scale = torch.full((1,), 0.37, device=dev)
    yd = y.detach()

    def separate(direction: str, delayed: bool) -> tuple[torch.Tensor, ...]:
        if direction == "fwd":
            with torch.no_grad():
                t = SwiGLUFunction.apply(yd, None)
        else:
            (t,) = torch.autograd.grad(out, y, dout, retain_graph=True)
        if delayed:
            amax = torch.zeros(1, device=dev)
            q, qt = fq.quantize_delayed(t, fq.E4M3, scale, amax, transposed=True)
        else:
            q, qt = fq.quantize_tensorwise(t, fq.E4M3, transposed=True)
        assert q is not None and qt is not None
        return t, q.data, qt.data, q.scale_inv

    def fused(direction: str, delayed: bool) -> tuple[torch.Tensor, ...]:
        slots = fq.scale_slots(torch.device(dev))
        width = ffn if direction == "fwd" else 2 * ffn
        t = torch.empty(tokens, width, device=dev, dtype=torch.bfloat16)
        extra: dict = {}
        if delayed:
            extra = dict(
                scale=scale, scale_inv=slots[0:1], q=torch.empty(tokens, width, device=dev, dtype=fq.E4M3),
                qt=torch.empty(width, tokens, device=dev, dtype=fq.E4M3),
            )  # fmt: skip
        if direction == "fwd":
            swiglu_fp8.forward(yd, None, t, dtype=fq.E4M3, amax=slots[1:2], **extra)
        else:
            swiglu_fp8.backward(yd, None, dout, t, dtype=fq.E4M3, amax=slots[1:2], **extra)
        if delayed:
            return t, extra["q"], extra["qt"], slots[0:1]
        q, qt = fq.quantize_tensorwise(t, fq.E4M3, transposed=True, slots=slots)
        assert q is not None and qt is not None
        return t, q.data, qt.data, q.scale_inv

    def same(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> bool:
        return all(torch.equal(u.view(torch.uint8), v.view(torch.uint8)) for u, v in zip(a, b, strict=True))

    cases = [(d, delayed) for d in ("fwd", "bwd") for delayed in (False, True)]
    rows: list[dict] = [{"tile": "separate kernels"}]
    for d, delayed in cases:
        rows[0][f"{d}_{'delayed' if delayed else 'current'}_ms"] = timed(
            partial(separate, d, delayed), repeat, dry, inner=10
        )
    for tile in SWIGLU_TILES:
        swiglu_fp8.set_tiles(fwd=tile, bwd=tile)
        row: dict = {"tile": ",".join(map(str, tile))}
        try:
            row["bytes_right"] = all(same(fused(d, dl), separate(d, dl)) for d, dl in cases)
            for d, delayed in cases:
                row[f"{d}_{'delayed' if delayed else 'current'}_ms"] = timed(
                    partial(fused, d, delayed), repeat, dry, inner=10
                )
        except Exception as exc:  # noqa: BLE001  (a tile that fails to compile or run is recorded, not fatal)
            row["error"] = repr(exc)[:300]
        rows.append(row)
    for row in rows:
        print("sweep_swiglu", json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
    good = [r for r in rows[1:] if r.get("bytes_right") and "bwd_delayed_ms" in r]
    best: dict[str, str] = {}
    for d in ("fwd", "bwd"):
        pick = min(good, key=lambda r, d=d: r[f"{d}_current_ms"] + r[f"{d}_delayed_ms"]) if good else None
        best[d] = pick["tile"] if pick else "64,128,4"
    swiglu_fp8.set_tiles(fwd=tuple(map(int, best["fwd"].split(","))), bwd=tuple(map(int, best["bwd"].split(","))))  # type: ignore[arg-type]
    return rows, best["fwd"], best["bwd"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument(
        "--sweep-cast",
        action="store_true",
        help="only time the per-tensor cast kernels' candidate tiles; the last line printed is the fastest "
        "(for FL_GEMS_FP8_CAST_TILE)",
    )
    parser.add_argument(
        "--sweep-swiglu",
        action="store_true",
        help="only time the SwiGLU kernels that make the fp8 casts, per candidate tile, against the separate kernels; "
        "the last line printed is the fastest forward and backward tile (FL_GEMS_FP8_SWIGLU_TILE, _BWD_TILE)",
    )
    args = parser.parse_args()
    dry = args.dry_run
    dev = "cpu" if dry else "cuda"
    tokens = 256 if dry else args.tokens
    if args.sweep_swiglu:
        rows, fwd, bwd = sweep_swiglu(dev, args.repeat, dry, tokens)
        with open(args.out, "w") as f:
            json.dump(
                {
                    "device": "cpu (dry run)" if dry else torch.cuda.get_device_name(),
                    "sweep": rows,
                    "fwd": fwd,
                    "bwd": bwd,
                },
                f,
                indent=1,
            )
        print(f"{fwd} {bwd}")
        return 0
    if args.sweep_cast:
        rows, best = sweep_cast(dev, args.repeat, dry, tokens)
        with open(args.out, "w") as f:
            json.dump(
                {"device": "cpu (dry run)" if dry else torch.cuda.get_device_name(), "sweep": rows, "best": best},
                f,
                indent=1,
            )
        print(best)
        return 0
    models = {"dry": (256, 384, 256)} if dry else MODELS
    results: dict[str, object] = {
        "device": "cpu (dry run)" if dry else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "tokens": tokens,
        "gemm": [],
        "cast": [],
        "linear": [],
        "errors": [],
    }
    blockwise = fq.blockwise_reason(torch.device(dev))
    results["blockwise_reason"] = blockwise
    torch.manual_seed(0)
    for model, (hidden, qkv, ffn) in models.items():
        for name, (k, n) in layer_shapes(hidden, qkv, ffn).items():
            row = {"model": model, "linear": name, "m": tokens, "k": k, "n": n}
            for section, fn in (("gemm", bench_gemm), ("cast", bench_cast), ("linear", bench_linear)):
                try:
                    results[section].extend(fn(row, dev, args.repeat, dry, blockwise))  # type: ignore[union-attr]
                except Exception as exc:  # noqa: BLE001  (one shape's failure is recorded, the rest still run)
                    results["errors"].append(f"{section} {model} {name}: {exc!r} {traceback.format_exc()[-600:]}")  # type: ignore[union-attr]
            if not dry:
                torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    for section in ("gemm", "cast", "linear"):
        for entry in results[section]:  # type: ignore[attr-defined]
            print(section, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in entry.items()}))
    for error in results["errors"]:  # type: ignore[attr-defined]
        print("ERROR", error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
