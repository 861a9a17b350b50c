"""cuDNN attention (torch SDPA) by memory layout of q, k, v and dO: where its speed goes.

``python bench/gpu_attention_layouts.py --out layouts.json`` on the GPU machine;
``--dry-run`` runs every variant on the CPU at a tiny size (SDPA's math backend).

megatron's local spec hands core attention q [s, b, hq, d] (a copy megatron makes of
the query slice) and k, v [s, b, hkv, d] (strided slices of the fused QKV projection),
and reads the output as [s, b, hq * d]. cuDNN took 1.31 ms on those views at
[4096, 2, 16/8, 128] and 1.06 ms on contiguous [b, h, s, d] tensors (docs/gpu_pack.md).
Each variant here lays the same numbers out differently; forward and forward+backward
are timed separately (stream time: 16 calls in one CUDA graph after L2 flushes), and the
kernels cuDNN ran are listed (torch profiler), so a layout's cost can be told apart
from the copies a fix would add. Variants whose name ends in "+copies" include, in the
timing, the copies that would turn megatron's tensors into that layout and back.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

DRY = False
DEV = "cuda"
BF16 = torch.bfloat16


def _backends() -> list:
    from torch.nn.attention import SDPBackend

    return [SDPBackend.MATH] if DRY else [SDPBackend.CUDNN_ATTENTION]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """SDPA on [b, h, s, d] views, cuDNN only (math on the dry run)."""
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(_backends()):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)


def _storage(order: str, dims: dict[str, int], requires_grad: bool = True) -> torch.Tensor:
    """A contiguous tensor whose dimensions are ``order`` (letters of b, h, s, d)."""
    t = torch.randn(*(dims[c] for c in order), device=DEV, dtype=BF16)
    return t.requires_grad_(requires_grad)


def _bhsd(t: torch.Tensor, order: str) -> torch.Tensor:
    """The [b, h, s, d] view of a tensor stored as ``order``."""
    return t.permute(*(order.index(c) for c in "bhsd"))


def variants(s: int, b: int, hq: int, hkv: int, d: int) -> dict[str, tuple[Callable[[], torch.Tensor], list, object]]:
    """name -> (forward returning the output as the next op reads it, leaves, dO for that output).

    Every view is made inside the forward: autograd runs a node's backward on the stream its
    forward ran on, and a view made outside the timed CUDA graph's capture would tie the
    capture to the default stream.
    """
    scale = 1.0 / math.sqrt(d)
    group = hq // hkv
    out: dict[str, tuple] = {}

    # megatron's: the fused projection [s, b, hkv, (group + 2) d]; q copied to [s, b, hq, d], k and v slices
    mixed = torch.randn(s, b, hkv, (group + 2) * d, device=DEV, dtype=BF16, requires_grad=True)
    do_sbh = torch.randn(s, b, hq * d, device=DEV, dtype=BF16)

    def megatron_qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q = mixed[..., : group * d].reshape(s, b, hq, d)
        return q, mixed[..., group * d : (group + 1) * d], mixed[..., (group + 1) * d :]

    def megatron_views() -> torch.Tensor:
        q, k, v = (t.permute(1, 2, 0, 3) for t in megatron_qkv())
        return _attend(q, k, v, scale).permute(2, 0, 1, 3).reshape(s, b, hq * d)

    out["megatron views (the pack today)"] = (megatron_views, [mixed], do_sbh)

    def megatron_views_mha() -> torch.Tensor:
        q, k, v = (t.permute(1, 2, 0, 3) for t in megatron_qkv())
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return _attend(q, k, v, scale).permute(2, 0, 1, 3).reshape(s, b, hq * d)

    out["megatron views, k v repeated (MHA) +copies"] = (megatron_views_mha, [mixed], do_sbh)

    def kv_contiguous() -> torch.Tensor:
        q, k, v = megatron_qkv()
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k.contiguous(), v.contiguous()))
        return _attend(q, k, v, scale).permute(2, 0, 1, 3).reshape(s, b, hq * d)

    out["megatron, k v contiguous [s,b,h,d] +copies"] = (kv_contiguous, [mixed], do_sbh)

    def bhsd_copies() -> torch.Tensor:
        q, k, v = (t.permute(1, 2, 0, 3).contiguous() for t in megatron_qkv())
        return _attend(q, k, v, scale).permute(2, 0, 1, 3).reshape(s, b, hq * d)

    out["megatron -> [b,h,s,d] +copies"] = (bhsd_copies, [mixed], do_sbh)

    dims_q = {"b": b, "h": hq, "s": s, "d": d}
    dims_kv = {"b": b, "h": hkv, "s": s, "d": d}
    for order in ("bhsd", "sbhd", "bshd", "hsbd", "hbsd"):
        q, k, v = _storage(order, dims_q), _storage(order, dims_kv), _storage(order, dims_kv)
        do = _bhsd(_storage(order, dims_q, requires_grad=False), order)

        def plain(q=q, k=k, v=v, order=order) -> torch.Tensor:
            return _attend(_bhsd(q, order), _bhsd(k, order), _bhsd(v, order), scale)

        out[f"all contiguous {order}"] = (plain, [q, k, v], do)
        if order in ("bhsd", "sbhd"):
            other = "sbhd" if order == "bhsd" else "bhsd"
            do_other = _bhsd(_storage(other, dims_q, requires_grad=False), other)
            out[f"all contiguous {order}, dO {other}"] = (plain, [q, k, v], do_other)

            def mha(q=q, k=k, v=v, order=order) -> torch.Tensor:
                kr = _bhsd(k, order).repeat_interleave(group, dim=1)
                vr = _bhsd(v, order).repeat_interleave(group, dim=1)
                return _attend(_bhsd(q, order), kr, vr, scale)

            out[f"all contiguous {order}, k v repeated (MHA) +copies"] = (mha, [q, k, v], do)
    return out


def _stream_ms(fn: Callable[[], None]) -> float:
    from fl_patch.impls.flaggems.kernels import graph_timed

    return graph_timed(fn)


def _kernels(fn: Callable[[], None]) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = []
    for event in prof.key_averages():
        if event.device_type.name == "CUDA" or "sdpa" in event.key or "cudnn" in event.key:
            names.append(f"{event.key[:110]} x{event.count} {event.device_time_total / event.count:.1f}us")
    return names


def measure(s: int, b: int, hq: int, hkv: int, d: int) -> list[dict]:
    flops = 3.5 * 4 * b * hq * s * s * d * 0.5
    rows = []
    for name, (forward, leaves, do) in variants(s, b, hq, hkv, d).items():
        entry: dict[str, object] = {"shape": f"[{s}, {b}, {hq}/{hkv}, {d}]", "variant": name}

        def fwd(forward=forward) -> None:
            forward()

        def fwd_bwd(forward=forward, leaves=leaves, do=do) -> None:
            for leaf in leaves:
                leaf.grad = None
            forward().backward(do)

        try:
            fwd_bwd()
            if DRY:
                entry["ok"] = True
            else:
                entry["fwd_ms"] = _stream_ms(fwd)
                entry["fwd_bwd_ms"] = _stream_ms(fwd_bwd)
                entry["bwd_ms"] = entry["fwd_bwd_ms"] - entry["fwd_ms"]
                entry["TFLOPs"] = flops / (entry["fwd_bwd_ms"] / 1e3) / 1e12
                entry["fwd_TFLOPs"] = flops / 3.5 / (entry["fwd_ms"] / 1e3) / 1e12
                entry["kernels"] = _kernels(fwd_bwd)
        except Exception as exc:  # noqa: BLE001  (one variant failing must not stop the table)
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            traceback.print_exc()
        rows.append(entry)
        shown = (
            f"fwd {entry['fwd_ms']:.3f} bwd {entry['bwd_ms']:.3f} fwd+bwd {entry['fwd_bwd_ms']:.3f} ms "
            f"{entry['TFLOPs']:.0f} TFLOP/s"
            if "bwd_ms" in entry
            else entry.get("error", "ok")
        )
        print(f"{entry['shape']:22s} {name:45s} {shown}", flush=True)
        for line in entry.get("kernels", []):
            print(f"      {line}", flush=True)
        if not DRY:
            torch.cuda.empty_cache()
    return rows


def projections(s: int, b: int, hidden: int, heads: int, d: int) -> list[dict]:
    """The QKV projection as megatron runs it ([s*b, heads*d] out) against a head-major one
    ([heads, s*b, d] out: a batched product whose every head is a contiguous [tokens, d] block),
    forward and forward+backward, the backward of the head-major one as a custom function would
    run it (dY copied to [tokens, heads*d], then the two products megatron's backward runs)."""
    t = s * b
    x = torch.randn(t, hidden, device=DEV, dtype=BF16, requires_grad=True)
    w = torch.randn(heads * d, hidden, device=DEV, dtype=BF16, requires_grad=True)
    dy = torch.randn(t, heads * d, device=DEV, dtype=BF16)
    dyh = torch.randn(heads, t, d, device=DEV, dtype=BF16)
    flops = 2 * t * hidden * heads * d
    rows = []

    def plain_fwd() -> None:
        F.linear(x, w)

    def plain_fwd_bwd() -> None:
        x.grad = w.grad = None
        F.linear(x, w).backward(dy)

    def head_fwd() -> None:
        torch.matmul(x.detach(), w.detach().view(heads, d, hidden).transpose(1, 2))

    def head_fwd_bwd() -> None:
        torch.matmul(x.detach(), w.detach().view(heads, d, hidden).transpose(1, 2))
        flat = dyh.permute(1, 0, 2).reshape(t, heads * d)
        torch.mm(flat, w.detach())
        torch.mm(flat.t(), x.detach())

    for name, fwd, both in (
        ("plain [t, heads*d]", plain_fwd, plain_fwd_bwd),
        ("head-major [heads, t, d]", head_fwd, head_fwd_bwd),
    ):
        entry: dict[str, object] = {"projection": name, "shape": f"x [{t}, {hidden}] w [{heads}*{d}, {hidden}]"}
        try:
            both()
            if not DRY:
                entry["fwd_ms"] = _stream_ms(fwd)
                entry["fwd_bwd_ms"] = _stream_ms(both)
                entry["fwd_TFLOPs"] = flops / (entry["fwd_ms"] / 1e3) / 1e12
                entry["fwd_bwd_TFLOPs"] = 3 * flops / (entry["fwd_bwd_ms"] / 1e3) / 1e12
        except Exception as exc:  # noqa: BLE001
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            traceback.print_exc()
        print(f"projection {name:28s} {entry}", flush=True)
        rows.append(entry)
    return rows


def main() -> int:
    global DRY, DEV
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="attention_layouts.json")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    shapes = [(4096, 2, 16, 8, 128), (4096, 1, 16, 8, 128)]
    if args.dry_run:
        DRY, DEV = True, "cpu"
        shapes = [(32, 2, 4, 2, 16)]
    t0 = time.time()
    result: dict[str, object] = {"rows": []}
    if not DRY:
        result["device"] = torch.cuda.get_device_name()
        result["versions"] = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
    for shape in shapes:
        result["rows"].extend(measure(*shape))
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    result["projections"] = projections(*((64, 2, 32, 4, 16) if DRY else (4096, 2, 2048, 32, 128)))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"done in {time.time() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
