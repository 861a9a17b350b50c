"""Per-op speed of the FlagGems pack on one GPU: ours vs torch eager (upstream's code), Liger, FlagGems.

``python bench/gpu_ops.py --out ops.json --md ops.md`` (on the GPU machine; needs
megatron-core, and flag_gems / liger_kernel where present). For each op at the
shapes the issue's ~1B baseline GPT uses (seq 2048, micro-batch 4,
hidden 2048, 16 heads in 4 groups, head dim 128, FFN 5632, vocab 32000; RMSNorm also
at the baseline's [16384, 4096]), bf16, forward+backward is timed with
``triton.testing.do_bench`` (median) for every implementation that has the op:

- ``torch``: what upstream megatron-core 0.19.2 runs in the local spec without
  Apex/TE (``F.rms_norm``/``F.layer_norm``; chunk+silu*mul; ``_apply_rotary_pos_emb_bshd``;
  ``DotProductAttention.forward`` on a module upstream built; ``FusedScaleMaskSoftmax``;
  ``vocab_parallel_cross_entropy``), eager.
- ``ours``: the pack's default backend (``fl_patch.impls.flaggems.ops``).
- ``flaggems``: FlagGems 5.0.2 through the pack's wrappers (``gems.py``), where it has the op.
- ``liger``: liger-kernel, where it has the op (its own layout/semantics, noted).
- ``torch_sdpa``: for attention, ``F.scaled_dot_product_attention`` (cuDNN/flash), a
  reference point that is not in megatron's local spec.

Memory-bound ops also get achieved bandwidth (the fewest bytes a fused fwd+bwd must
move, over the time) against the device-to-device copy bandwidth measured in the
same run (2 GiB), and the time one torch copy kernel takes to move that many bytes
(what a problem of that size costs in a single kernel); attention gets TFLOP/s (causal
fwd+bwd = 3.5 x the forward's 2 matmuls, halved). GEMMs of the model: torch (cuBLAS) vs FlagGems ``mm``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fl_patch.impls.flaggems import ops
from fl_patch.impls.flaggems._runtime import use_backend
from fl_patch.impls.flaggems.kernels import graph_timed

DEV = "cuda"
BF16 = torch.bfloat16
# The GPT's sizes (the issue's ~1B baseline): seq, micro-batch, hidden, query heads, kv heads, head dim, FFN, vocab.
# ``--dry-run`` shrinks them and runs every code path once on a CPU (TRITON_INTERPRET=1).
SEQ, MBS, HIDDEN, HQ, HKV, HEAD, FFN, VOCAB = 2048, 4, 2048, 16, 4, 128, 5632, 32000
NORM_SHAPES = ((16384, 4096), (8192, 2048))
DRY = False
RESULTS: dict[str, object] = {"ops": [], "gemm": []}


def _graph_time(fn: Callable[[], None], grads: list[torch.Tensor]) -> float:
    """GPU time of fn (forward+backward) replayed as one CUDA graph: no launch or Python overhead."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            for g in grads:
                g.grad = None
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    for g in grads:
        g.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    ms = do_bench(graph.replay, warmup=10, rep=150, return_mode="median")
    graph.reset()
    return ms


def _stream_time(fn: Callable[[], None], grads: list[torch.Tensor]) -> float:
    """GPU time of fn inside a stream of work: 16 calls captured in one CUDA graph, the L2 flushed
    before each (a graph of the flushes alone subtracted), divided by 16.

    What the op costs inside a training step. One replay of a graph holding one call
    ('graph') also pays the graph's own launch latency, 4-6 us on an H200 (RMSNorm
    [8192, 2048]: 59.3 us replayed alone, 55.4 us in a stream; a copy of its bytes 45 vs
    42 us): a fixed cost that weighs on a 50 us op and not on a 2 GiB copy.
    """

    def call() -> None:
        for g in grads:
            g.grad = None
        fn()

    return graph_timed(call)


def _row(
    op: str,
    shape: str,
    impl: str,
    fn: Callable[[], None],
    grads: list[torch.Tensor],
    *,
    bytes_: float | None = None,
    flops: float | None = None,
    note: str = "",
    graph: bool = True,
) -> None:
    """Time fn eagerly (do_bench, launches included) and as a CUDA graph (GPU time); record both."""
    entry: dict[str, object] = {"op": op, "shape": shape, "impl": impl, "note": note}
    try:
        fn()
        if DRY:
            t0 = time.perf_counter()
            fn()
            entry["eager_ms"] = (time.perf_counter() - t0) * 1e3
        else:
            torch.cuda.synchronize()
            entry["eager_ms"] = do_bench(fn, warmup=10, rep=150, grad_to_none=grads, return_mode="median")
            try:
                if not graph:
                    raise RuntimeError("not captured: it syncs with the host")
                entry["graph_ms"] = _graph_time(fn, grads)
                entry["stream_ms"] = _stream_time(fn, grads)
            except Exception as exc:  # noqa: BLE001  (some upstream code cannot be captured)
                entry["graph_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                torch.cuda.synchronize()
        ms = entry.get("stream_ms", entry.get("graph_ms", entry["eager_ms"]))
        entry["ms"] = ms
        if bytes_:
            entry["TBps"] = bytes_ / (ms / 1e3) / 1e12
            if not DRY:
                entry["copy_same_bytes_ms"] = _copy_same_bytes_ms(bytes_)
        if flops:
            entry["TFLOPs"] = flops / (ms / 1e3) / 1e12
    except Exception as exc:  # noqa: BLE001  (one implementation failing must not stop the table)
        entry["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        traceback.print_exc()
    RESULTS["ops"].append(entry)
    if "ms" in entry:
        shown = f"graph {entry.get('graph_ms', float('nan')):.3f} ms, eager {entry['eager_ms']:.3f} ms"
    else:
        shown = entry["error"][:80]
    print(f"  {op:14s} {impl:10s} {shown}", flush=True)


_COPY_MS: dict[int, float] = {}


def _copy_same_bytes_ms(nbytes: float) -> float:
    """GPU time of one torch copy kernel moving ``nbytes`` (read + write), in a stream (``_stream_time``).

    The reference for an op's size: a 30-60 MB problem pays fixed per-kernel costs that
    the 2 GiB copy bandwidth does not show (a copy of 8.4 MB ran at 1.5 TB/s on an H200).
    """
    key = int(nbytes)
    if key not in _COPY_MS:
        src = torch.empty(max(1, key // 4), dtype=BF16, device=DEV)
        dst = torch.empty_like(src)
        _COPY_MS[key] = _stream_time(lambda: dst.copy_(src), [])
    return _COPY_MS[key]


def _fwd_bwd(forward: Callable[[], torch.Tensor], grad: torch.Tensor | None = None) -> Callable[[], None]:
    def run() -> None:
        out = forward()
        if isinstance(out, tuple):
            out = out[0]
        if grad is None:
            out.float().mean().backward()
        else:
            out.backward(grad)

    return run


def copy_bandwidth() -> float:
    if DRY:
        return float("nan")
    src = torch.empty(2 * 1024**3 // 2, dtype=BF16, device=DEV).normal_()
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=10, rep=100, return_mode="median")
    src = dst = None
    torch.cuda.empty_cache()
    return 2 * 2 * 1024**3 / (ms / 1e3) / 1e12


def _liger():
    try:
        import liger_kernel.ops as liger  # noqa: F401
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.rope import LigerRopeFunction
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
        from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction

        return {
            "rms": LigerRMSNormFunction, "ln": LigerLayerNormFunction, "swiglu": LigerFusedGateUpSiLUMulFunction,
            "rope": LigerRopeFunction, "ce": LigerCrossEntropyFunction, "softmax": LigerSoftmaxFunction,
        }  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        print("liger-kernel unavailable:", exc)
        return None


def _has_gems() -> bool:
    try:
        import flag_gems  # noqa: F401

        return True
    except Exception as exc:  # noqa: BLE001
        print("flag_gems unavailable:", exc)
        return False


def bench_norms(liger, gems: bool) -> None:
    for rows, width in NORM_SHAPES:
        _bench_norms_at(rows, width, liger, gems)
        torch.cuda.empty_cache()


def _bench_norms_at(rows: int, width: int, liger, gems: bool) -> None:
    x = torch.randn(rows, width, device=DEV, dtype=BF16, requires_grad=True)
    w = (1 + 0.1 * torch.randn(width, device=DEV)).to(BF16).requires_grad_(True)
    b = (0.1 * torch.randn(width, device=DEV)).to(BF16).requires_grad_(True)
    dy = torch.randn(rows, width, device=DEV, dtype=BF16)
    nbytes = 5 * rows * width * 2
    shape = f"[{rows}, {width}]"
    _row("rms_norm", shape, "torch", _fwd_bwd(lambda: F.rms_norm(x, (width,), w, 1e-5), dy), [x, w], bytes_=nbytes)
    _row("rms_norm", shape, "ours", _fwd_bwd(lambda: ops.rms_norm(x, w, 1e-5), dy), [x, w], bytes_=nbytes)
    if gems:
        with use_backend("rms_norm", "flaggems"):
            _row("rms_norm", shape, "flaggems", _fwd_bwd(lambda: ops.rms_norm(x, w, 1e-5), dy), [x, w], bytes_=nbytes)
    if liger:
        _row(
            "rms_norm",
            shape,
            "liger",
            _fwd_bwd(lambda: liger["rms"].apply(x, w, 1e-5, 0.0, "llama", False), dy),
            [x, w],
            bytes_=nbytes,
        )
    if (rows, width) == NORM_SHAPES[0]:
        _row(
            "layer_norm",
            shape,
            "torch",
            _fwd_bwd(lambda: F.layer_norm(x, (width,), w, b, 1e-5), dy),
            [x, w, b],
            bytes_=nbytes,
        )
        _row(
            "layer_norm",
            shape,
            "ours",
            _fwd_bwd(lambda: ops.layer_norm(x, w, b, 1e-5), dy),
            [x, w, b],
            bytes_=nbytes,
        )
        if gems:
            with use_backend("layer_norm", "flaggems"):
                _row(
                    "layer_norm",
                    shape,
                    "flaggems",
                    _fwd_bwd(lambda: ops.layer_norm(x, w, b, 1e-5), dy),
                    [x, w, b],
                    bytes_=nbytes,
                )
        if liger:
            _row(
                "layer_norm",
                shape,
                "liger",
                _fwd_bwd(lambda: liger["ln"].apply(x, w, b, 1e-5), dy),
                [x, w, b],
                bytes_=nbytes,
            )
    torch.cuda.empty_cache()


def bench_swiglu(liger, gems: bool) -> None:
    rows, ffn = SEQ * MBS, FFN
    y = torch.randn(SEQ, MBS, 2 * ffn, device=DEV, dtype=BF16, requires_grad=True)
    dy = torch.randn(SEQ, MBS, ffn, device=DEV, dtype=BF16)
    nbytes = 8 * rows * ffn * 2
    shape = f"[{SEQ}, {MBS}, 2x{ffn}]"

    def torch_swiglu() -> torch.Tensor:
        a, g = torch.chunk(y, 2, dim=-1)
        return F.silu(a) * g

    _row("swiglu", shape, "torch", _fwd_bwd(torch_swiglu, dy), [y], bytes_=nbytes)
    _row("swiglu", shape, "ours", _fwd_bwd(lambda: ops.swiglu(y), dy), [y], bytes_=nbytes)
    if gems:
        with use_backend("swiglu", "flaggems"):
            _row("swiglu", shape, "flaggems", _fwd_bwd(lambda: ops.swiglu(y), dy), [y], bytes_=nbytes)
    if liger:
        _row(
            "swiglu",
            shape,
            "liger",
            _fwd_bwd(lambda: liger["swiglu"].apply(y.view(-1, 2 * ffn)), dy.view(-1, ffn)),
            [y],
            bytes_=nbytes,
            note="fused gate-up on a 2-D view (3-D input: wrong gradient shape)",
        )
    torch.cuda.empty_cache()


def bench_rope(liger) -> None:
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd

    s, b, hq, hkv, d = SEQ, MBS, HQ, HKV, HEAD
    mixed = torch.randn(s, b, hkv, (hq // hkv + 2) * d, device=DEV, dtype=BF16)
    q = mixed[..., : (hq // hkv) * d].reshape(s, b, hq, d).detach().requires_grad_(True)
    k = mixed[..., (hq // hkv) * d : (hq // hkv + 1) * d].detach().requires_grad_(True)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=DEV, dtype=torch.float32) / d))
    angles = torch.outer(torch.arange(s, device=DEV, dtype=torch.float32), inv)
    freqs = torch.cat((angles, angles), -1)[:, None, None, :]
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    nbytes = 4 * (q.numel() + k.numel()) * 2
    shape = f"q [{s}, {b}, {hq}, {d}] + k [{hkv} heads]"

    def both(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            torch.autograd.backward([fn(q), fn(k)], [dq, dk])

        return run

    _row("rope", shape, "torch", both(lambda t: _apply_rotary_pos_emb_bshd(t, freqs)), [q, k], bytes_=nbytes)
    _row("rope", shape, "ours", both(lambda t: ops.rotary(t, freqs, 1.0, False)), [q, k], bytes_=nbytes)
    if liger:
        ql = torch.randn(b, s, hq, d, device=DEV, dtype=BF16).requires_grad_(True)
        kl = torch.randn(b, s, hkv, d, device=DEV, dtype=BF16).requires_grad_(True)
        cos, sin = torch.cos(freqs[:, 0, 0]).to(BF16)[None], torch.sin(freqs[:, 0, 0]).to(BF16)[None]
        dql, dkl = torch.randn(b, hq, s, d, device=DEV, dtype=BF16), torch.randn(b, hkv, s, d, device=DEV, dtype=BF16)

        def liger_rope() -> None:
            qo, ko = liger["rope"].apply(ql.transpose(1, 2), kl.transpose(1, 2), cos, sin)
            torch.autograd.backward([qo, ko], [dql, dkl])

        _row("rope", shape, "liger", liger_rope, [ql, kl], bytes_=nbytes, note="its [b,s,h,d] layout, cos/sin given")
    torch.cuda.empty_cache()


def bench_qkv_rope() -> None:
    """Query and key of the fused QKV projection rotated, value split off, forward and backward.

    What megatron's attention does around RoPE: the split path (``torch.split``, the
    query's reshape, which copies, RoPE of query and key, the gradients' concatenation)
    upstream and with the pack's RoPE, against the pack's one-launch function that
    ``fused_single_qkv_rope=True`` uses.
    """
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd

    s, b, hq, hkv, d = SEQ, MBS, HQ, HKV, HEAD
    group = hq // hkv
    mixed = torch.randn(s, b, hkv, (group + 2) * d, device=DEV, dtype=BF16, requires_grad=True)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=DEV, dtype=torch.float32) / d))
    angles = torch.outer(torch.arange(s, device=DEV, dtype=torch.float32), inv)
    freqs = torch.cat((angles, angles), -1)[:, None, None, :]
    grads = [torch.randn(s, b, n, d, device=DEV, dtype=BF16) for n in (hq, hkv, hkv)]
    nbytes = 4 * mixed.numel() * 2
    shape = f"[{s}, {b}, {hkv}, ({group}+2)x{d}]"

    def split_path(rotate: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            q, k, v = torch.split(mixed, [group * d, d, d], dim=3)
            q = q.reshape(s, b, hq, d)
            torch.autograd.backward([rotate(q), rotate(k), v], grads)

        return run

    def fused() -> None:
        torch.autograd.backward(list(ops.fused_qkv_rotary(mixed, freqs, freqs, group, d, False)), grads)

    _row("qkv_rope", shape, "torch", split_path(lambda t: _apply_rotary_pos_emb_bshd(t, freqs)), [mixed],
         bytes_=nbytes, note="upstream split path")  # fmt: skip
    _row("qkv_rope", shape, "ours (split)", split_path(lambda t: ops.rotary(t, freqs, 1.0, False)), [mixed],
         bytes_=nbytes, note="split path, the pack's RoPE")  # fmt: skip
    _row("qkv_rope", shape, "ours", fused, [mixed], bytes_=nbytes, note="fused_single_qkv_rope=True")
    from fl_patch.impls.flaggems.kernels import rope as rope_kernels

    picked = [getattr(t, "best_config", None) for t in (rope_kernels._QKV_FWD, rope_kernels._QKV_BWD)]
    if all(picked):
        RESULTS["ops"][-1]["note"] += "; rows x warps: " + ", ".join(
            f"{way} {c.kwargs['BLOCK_R']}x{c.num_warps}" for way, c in zip(("fwd", "bwd"), picked, strict=True)
        )
    torch.cuda.empty_cache()


# Attention shapes: the 0.85B GPT's, and the issue's [s 4096, 16 heads, 8 kv heads, d 128] at the
# 1.31B stand-in's micro-batch 2 (tests/support/flaggems/gems_gpt.py --preset llama131).
ATTENTION_SHAPES = ((2048, 4, 16, 4, 128), (4096, 2, 16, 8, 128))


def _sdpa_row(shape: str, impl: str, qkv, dout, grads, flops: float, scale: float, backends, note: str) -> None:
    from torch.nn.attention import sdpa_kernel

    s, b = dout.shape[0], dout.shape[1]

    def sdpa() -> torch.Tensor:
        q, k, v = (t.permute(1, 2, 0, 3) for t in qkv())
        with sdpa_kernel(backends):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
        return out.permute(2, 0, 1, 3).reshape(s, b, -1)

    _row("attention", shape, impl, _fwd_bwd(sdpa, dout), grads, flops=flops, note=note)


# Batch sizes around it, for cuDNN only: the pack's call (megatron's layout) and contiguous [b, h, s, d].
ATTENTION_BATCHES = ((4096, 1, 16, 8, 128), (4096, 4, 16, 8, 128))


def bench_attention(gems: bool) -> None:
    for dims in ATTENTION_SHAPES:
        _bench_attention_at(*dims)
        torch.cuda.empty_cache()
    for dims in ATTENTION_BATCHES if not DRY else ():
        _bench_attention_at(*dims, only_cudnn=True)
        torch.cuda.empty_cache()


def _contiguous_sdpa_row(shape: str, s: int, b: int, hq: int, hkv: int, d: int, flops: float, scale: float) -> None:
    """cuDNN through SDPA on contiguous [b, heads, s, d] tensors (what a [b, h, s, d] model would hand it)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(b, hq, s, d, device=DEV, dtype=BF16, requires_grad=True)
    k = torch.randn(b, hkv, s, d, device=DEV, dtype=BF16, requires_grad=True)
    v = torch.randn(b, hkv, s, d, device=DEV, dtype=BF16, requires_grad=True)
    do = torch.randn(b, hq, s, d, device=DEV, dtype=BF16)

    def run() -> None:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
        out.backward(do)

    _row("attention", shape, "torch_sdpa (cudnn, [b,h,s,d])", run, [q, k, v], flops=flops, note="contiguous inputs")


def _megatron_qkv(mixed: torch.Tensor, s: int, b: int, hq: int, hkv: int, d: int):
    """q, k, v from the fused QKV projection exactly as megatron-core 0.19.2's
    ``SelfAttention.get_query_key_value_tensors`` makes them (no TE): ``torch.split`` of the
    [s, b, hkv, (group + 2) d] view, the query reshaped to [s, b, hq, d] (a copy), k and v
    strided views. Its backward is one concatenation of dq, dk and dv."""
    group = hq // hkv
    q, k, v = torch.split(mixed, [group * d, d, d], dim=3)
    return q.reshape(s, b, hq, d), k, v


def _bench_attention_at(s: int, b: int, hq: int, hkv: int, d: int, only_cudnn: bool = False) -> None:
    """Core attention forward+backward at one shape, two ways for the pack (the op alone on megatron's
    q, k, v; and with megatron's split of the fused projection around it) and the references."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig
    from torch.nn.attention import SDPBackend

    from fl_patch.impls.flaggems import sdpa as pack_sdpa

    if DRY:
        s, b, hq, hkv, d = SEQ, MBS, HQ, HKV, HEAD
    group = hq // hkv
    mixed = torch.randn(s, b, hkv, (group + 2) * d, device=DEV, dtype=BF16, requires_grad=True)

    def qkv():
        return _megatron_qkv(mixed, s, b, hq, d=d, hkv=hkv)

    # The op alone: q, k, v laid out as megatron hands them to core attention (q contiguous
    # [s, b, hq, d], k and v strided slices of the projection), each a leaf of its own.
    with torch.no_grad():
        q0, k0, v0 = _megatron_qkv(mixed.detach(), s, b, hq, hkv, d)
    leaves = [t.detach().requires_grad_() for t in (q0.contiguous(), k0, v0)]
    dout = torch.randn(s, b, hq * d, device=DEV, dtype=BF16)
    flops = 3.5 * 4 * b * hq * s * s * d * 0.5
    shape = f"[{s}, {b}, {hq}/{hkv} heads, {d}] causal"
    cfg = TransformerConfig(
        num_layers=1, hidden_size=hq * d, num_attention_heads=hq, num_query_groups=hkv, bf16=True,
        params_dtype=BF16, masked_softmax_fusion=False, attention_dropout=0.0,
    )  # fmt: skip
    module = DotProductAttention(cfg, 1, AttnMaskType.causal, "self").to(DEV)
    scale = 1.0 / math.sqrt(d)
    if not only_cudnn:
        _row(
            "attention",
            shape,
            "torch",
            _fwd_bwd(lambda: DotProductAttention.forward(module, *leaves, None), dout),
            leaves,
            flops=flops,
            note="upstream DotProductAttention, the op alone",
        )
    if not DRY:
        _contiguous_sdpa_row(shape, s, b, hq, hkv, d, flops, scale)
    backends = (("cudnn", "pack default: cuDNN via SDPA"), ("triton", "pack's Triton kernel"))
    for backend, note in backends[:1] if only_cudnn else backends:
        with use_backend("attention", backend):
            calls = pack_sdpa.CALLS["cudnn"]
            gqa = f"; GQA {pack_sdpa.gqa_mode()}" if backend == "cudnn" else ""
            _row(
                "attention",
                shape,
                f"ours ({backend})",
                _fwd_bwd(lambda: ops.flash_attention(*leaves, True, scale).reshape(s, b, -1), dout),
                leaves,
                flops=flops,
                note=note + ", the op alone on megatron's q, k, v" + gqa,
            )
            if backend == "cudnn" and pack_sdpa.CALLS["cudnn"] == calls and not DRY:
                RESULTS["ops"][-1]["note"] += "; cuDNN DID NOT RUN"
            _row(
                "attention",
                shape,
                f"ours ({backend}) + split",
                _fwd_bwd(lambda: ops.flash_attention(*qkv(), True, scale).reshape(s, b, -1), dout),
                [mixed],
                flops=flops,
                note=note + ", with megatron's split of the fused projection (its backward: one concatenation)",
            )
    if not DRY and not only_cudnn:
        for name, backends in (
            ("torch_sdpa (cudnn)", [SDPBackend.CUDNN_ATTENTION]),
            ("torch_sdpa (flash)", [SDPBackend.FLASH_ATTENTION]),
            ("torch_sdpa (default)", [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                                      SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]),
        ):  # fmt: skip
            _sdpa_row(
                shape, name, lambda: leaves, dout, leaves, flops, scale, backends, "not in the local spec; enable_gqa"
            )


def bench_attention_configs() -> None:
    """The Triton kernels' block configs at the issue's shape, each kernel alone (stream time)."""
    from fl_patch.impls.flaggems.kernels import attention as ka

    s, b, hq, hkv, d = ATTENTION_SHAPES[-1] if not DRY else (SEQ, MBS, HQ, HKV, HEAD)
    group = hq // hkv
    q = torch.randn(s, b, hq, d, device=DEV, dtype=BF16)
    k = torch.randn(s, b, hkv, d, device=DEV, dtype=BF16)
    v = torch.randn(s, b, hkv, d, device=DEV, dtype=BF16)
    do = torch.randn(s, b, hq, d, device=DEV, dtype=BF16)
    o = torch.empty_like(q)
    lse = torch.empty(b * hq, s, device=DEV, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    scale = 1.0 / math.sqrt(d)
    qk = scale * 1.4426950408889634
    prec = "tf32" if not DRY else "interp"
    common = {"CAUSAL": True, "HEAD_DIM": d, "BLOCK_D": d, "PRECISION": prec}
    st = lambda t: (t.stride(0), t.stride(1), t.stride(2))  # noqa: E731
    ka.FlashAttentionFunction.apply  # noqa: B018  (module loaded)
    out_lse = ka.flash_attention(q, k, v, True, scale)  # noqa: F841  (fills nothing we use: o/lse below)
    ka._attn_fwd[(triton.cdiv(s, 64), b * hq)](
        q, k, v, o, lse, qk, s, s, hq, group, *st(q), *st(k), *st(v), *st(o), **common, BLOCK_M=64, BLOCK_N=64
    )
    delta = (o.float() * do.float()).sum(-1).permute(1, 2, 0).reshape(b * hq, s).contiguous()
    flops_fwd = 4 * b * hq * s * s * d * 0.5
    tables = {
        "fwd": [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3), (128, 64, 4, 4),
                (64, 64, 4, 3), (128, 32, 4, 4), (128, 128, 4, 2)],
        "dkdv": [(32, 128, 4, 3), (64, 128, 8, 2), (64, 128, 8, 3), (32, 64, 4, 3), (64, 64, 4, 2),
                 (32, 128, 8, 3), (16, 128, 4, 3), (64, 128, 4, 2)],
        "dq": [(128, 32, 4, 3), (128, 64, 8, 2), (64, 32, 4, 3), (64, 64, 4, 2), (128, 64, 8, 3),
               (128, 32, 8, 3), (64, 64, 4, 3), (128, 128, 8, 2)],
    }  # fmt: skip
    if DRY:
        tables = {kind: [(16, 16, 4, 1)] for kind in tables}
    RESULTS["attention_configs"] = []
    for kind, table in tables.items():
        for bm, bn, w, stages in table:
            meta = {**common, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": stages}
            if kind == "fwd":
                call = lambda meta=meta: ka._attn_fwd[(triton.cdiv(s, meta["BLOCK_M"]), b * hq)](  # noqa: E731
                    q, k, v, o, lse, qk, s, s, hq, group, *st(q), *st(k), *st(v), *st(o), **meta
                )
                flops = flops_fwd
            elif kind == "dkdv":
                call = lambda meta=meta: ka._attn_bwd_dkdv[(triton.cdiv(s, meta["BLOCK_N"]), b * hkv)](  # noqa: E731
                    q, k, v, do, lse, delta, dk, dv, qk, scale, s, s, hq, group,
                    *st(q), *st(k), *st(v), *st(do), *st(dk), **meta,
                )  # fmt: skip
                flops = 2.0 * flops_fwd  # dV, dP^T, dK (and the recomputed S): 4 of the 5 products
            else:
                call = lambda meta=meta: ka._attn_bwd_dq[(triton.cdiv(s, meta["BLOCK_M"]), b * hq)](  # noqa: E731
                    q, k, v, do, lse, delta, dq, qk, scale, s, s, hq, group,
                    *st(q), *st(k), *st(v), *st(do), *st(dq), **meta,
                )  # fmt: skip
                flops = 1.5 * flops_fwd
            entry = {"kernel": kind, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": stages}
            try:
                t0 = time.perf_counter()
                call()
                entry["compile_s"] = time.perf_counter() - t0
                if not DRY:
                    ms = graph_timed(call)
                    entry["ms"] = ms
                    entry["TFLOPs_nominal"] = flops / (ms / 1e3) / 1e12
            except Exception as exc:  # noqa: BLE001
                entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            RESULTS["attention_configs"].append(entry)
            print("  attn config", entry, flush=True)
    torch.cuda.empty_cache()


def _stand_in_shapes() -> list[tuple[int, ...]]:
    """Parameter shapes of the 1.31B stand-in (gems_gpt.py --preset llama131): 25 layers, hidden 2048."""
    h, ffn, vocab, layers, qkv = 2048, 5632, 32000, 25, (16 + 2 * 8) * 128
    if DRY:
        h, ffn, vocab, layers, qkv = 64, 96, 500, 2, 128
    per_layer = [(h,), (qkv, h), (h, h), (h,), (2 * ffn, h), (h, ffn)]
    return [(vocab, h), *(per_layer * layers), (h,), (vocab, h)]


def _event_ms(fn: Callable[[], None], reps: int = 5) -> float:
    if DRY:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def bench_optimizer() -> None:
    """Megatron's optimizer-step pieces without Apex/TE for the stand-in's fp32 main parameters, upstream vs pack."""
    from megatron.core import utils as mutils

    from fl_patch.impls.flaggems import optimizer as pack

    shapes = _stand_in_shapes()
    n = sum(math.prod(sh) for sh in shapes)
    gen = torch.Generator(device=DEV).manual_seed(0)
    params = [torch.randn(sh, device=DEV, generator=gen) * 0.02 for sh in shapes]
    grads = [torch.randn(sh, device=DEV, generator=gen) * 1e-3 for sh in shapes]
    entries = RESULTS.setdefault("optimizer", [])

    def record(what: str, impl: str, ms: float, nbytes: float, note: str = "") -> None:
        entry = {"what": what, "impl": impl, "ms": ms, "params": n, "TBps": nbytes / (ms / 1e3) / 1e12, "note": note}
        entries.append(entry)
        print(f"  optimizer {what:28s} {impl:26s} {ms:8.3f} ms  {entry['TBps']:.2f} TB/s {note}", flush=True)

    for name, make in (
        ("torch AdamW (foreach)", lambda ps: torch.optim.AdamW(ps, lr=1e-4, weight_decay=0.1)),
        ("pack FusedAdam", lambda ps: pack.FusedAdam(ps, lr=1e-4, weight_decay=0.1, adam_w_mode=True)),
    ):
        ps = [p.clone().requires_grad_(True) for p in params]
        for p, g in zip(ps, grads, strict=True):
            p.grad = g
        opt = make(ps)
        ms = _event_ms(opt.step)
        fused = bool(opt.param_groups[0].get("fused"))
        record("Adam step", name, ms, 28.0 * n, f"fused={fused}; bytes: p, g, m, v read, p, m, v written")
        del opt, ps
        torch.cuda.empty_cache()
    l2_up = mutils.local_multi_tensor_l2_norm if not DRY else None
    if l2_up is not None and l2_up.__module__ == "megatron.core.utils":
        record("grad L2 norm", "upstream local_multi_tensor_l2_norm", _event_ms(lambda: l2_up(0, None, [grads], False)),
               4.0 * n, "one torch.norm and one host sync per tensor")  # fmt: skip
    record("grad L2 norm", "pack (foreach)", _event_ms(lambda: pack.local_multi_tensor_l2_norm(0, None, [grads], False)),
           4.0 * n)  # fmt: skip
    scale_up = mutils.local_multi_tensor_scale
    if scale_up.__module__ == "megatron.core.utils":
        record("clip (grads *= c)", "upstream local_multi_tensor_scale",
               _event_ms(lambda: scale_up(0, None, [grads, grads], 0.999)), 8.0 * n, "copy_(src * scale) per tensor")  # fmt: skip
    record("clip (grads *= c)", "pack (foreach)",
           _event_ms(lambda: pack.local_multi_tensor_scale(0, None, [grads, grads], 0.999)), 8.0 * n)  # fmt: skip
    model = [torch.empty(sh, device=DEV, dtype=BF16) for sh in shapes]
    if scale_up.__module__ == "megatron.core.utils":
        record("main -> model params (bf16)", "upstream local_multi_tensor_scale",
               _event_ms(lambda: scale_up(0, None, [params, model], 1.0)), 6.0 * n, "fp32 temporary per tensor")  # fmt: skip
    record("main -> model params (bf16)", "pack (foreach copy)",
           _event_ms(lambda: pack.local_multi_tensor_scale(0, None, [params, model], 1.0)), 6.0 * n)  # fmt: skip
    params = grads = model = []
    torch.cuda.empty_cache()


def bench_launch() -> None:
    """Host cost of the small ops: wall time per forward+backward of 50 calls queued back to back (host
    enqueue time; the GPU work is far shorter at the host-bound shape), lean launch path vs triton's own
    (``FL_GEMS_LEAN_LAUNCH=0``), how many launches took each path, and a cProfile of the lean path."""
    import cProfile
    import io
    import pstats

    from fl_patch.impls.flaggems.kernels import LEAN_STATS, reload_settings

    def norm_case(rows: int) -> tuple:
        x = torch.randn(rows, HIDDEN, device=DEV, dtype=BF16, requires_grad=True)
        w = torch.ones(HIDDEN, device=DEV, dtype=BF16, requires_grad=True)
        dy = torch.randn_like(x)
        return (
            f"rms_norm [{rows}, {HIDDEN}]", _fwd_bwd(lambda: ops.rms_norm(x, w, 1e-5), dy), [x, w],
            _fwd_bwd(lambda: F.rms_norm(x, (HIDDEN,), w, 1e-5), dy),
        )  # fmt: skip

    y = torch.randn(64, 2 * FFN, device=DEV, dtype=BF16, requires_grad=True)
    dys = torch.randn(64, FFN, device=DEV, dtype=BF16)
    t = torch.randn(16, MBS, HQ, HEAD, device=DEV, dtype=BF16, requires_grad=True)
    freqs = torch.randn(16, 1, 1, HEAD, device=DEV)
    dt = torch.randn_like(t)
    cases = [
        norm_case(SEQ * MBS),
        norm_case(64),
        (f"swiglu [64, 2x{FFN}]", _fwd_bwd(lambda: ops.swiglu(y), dys), [y],
         _fwd_bwd(lambda: F.silu(y[..., :FFN]) * y[..., FFN:], dys)),
        (f"rope [16, {MBS}, {HQ}, {HEAD}]", _fwd_bwd(lambda: ops.rotary(t, freqs, 1.0, False), dt), [t], None),
    ]  # fmt: skip
    out = RESULTS.setdefault("host", [])

    def measure(fn: Callable[[], None], grads: list[torch.Tensor], calls: int = 50) -> tuple[float, float]:
        for _ in range(3):
            for g in grads:
                g.grad = None
            fn()
        if not DRY:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            for g in grads:
                g.grad = None
            fn()
        t1 = time.perf_counter()
        if not DRY:
            torch.cuda.synchronize()
        return (t1 - t0) / calls * 1e6, (time.perf_counter() - t0) / calls * 1e6

    for name, fn, grads, torch_fn in cases:
        if torch_fn is not None:
            host, wall = measure(torch_fn, grads)
            out.append({"op": name, "impl": "torch", "host_us": host, "wall_us": wall})
            print(f"  host {name:28s} torch                {host:8.1f} us host {wall:8.1f} us wall", flush=True)
        for mode in ("1", "0"):
            os.environ["FL_GEMS_LEAN_LAUNCH"] = mode
            reload_settings()
            try:
                before = dict(LEAN_STATS)
                host, wall = measure(fn, grads)
                counts = {k: LEAN_STATS[k] - before[k] for k in LEAN_STATS}
                entry = {"op": name, "impl": "ours (lean)" if mode == "1" else "ours (triton launch)",
                         "host_us": host, "wall_us": wall, "launches": counts}  # fmt: skip
                if mode == "1" and name.startswith("rms_norm [64"):
                    profile = cProfile.Profile()
                    profile.enable()
                    measure(fn, grads, calls=30)
                    profile.disable()
                    text = io.StringIO()
                    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(25)
                    entry["profile"] = text.getvalue()[-6000:]
                    print(entry["profile"], flush=True)
                out.append(entry)
                print(
                    f"  host {name:28s} {entry['impl']:20s} {host:8.1f} us host {wall:8.1f} us wall {counts}",
                    flush=True,
                )
            finally:
                os.environ.pop("FL_GEMS_LEAN_LAUNCH", None)
                reload_settings()
    if not DRY:
        torch.cuda.empty_cache()


def bench_softmax(liger) -> None:
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.utils import attention_mask_func

    from fl_patch.impls.flaggems import softmax

    shape4 = (MBS, HQ, SEQ, SEQ)
    module = FusedScaleMaskSoftmax(False, True, AttnMaskType.causal, False, attention_mask_func, True, None)
    x = torch.randn(shape4, device=DEV, dtype=BF16, requires_grad=True)
    dy = torch.randn(shape4, device=DEV, dtype=BF16)
    nbytes = 5 * x.numel() * 2
    shape = f"[{MBS}, {HQ}, {SEQ}, {SEQ}] causal"
    _row(
        "softmax",
        shape,
        "torch",
        _fwd_bwd(lambda: FusedScaleMaskSoftmax.forward(module, x, None), dy),
        [x],
        bytes_=nbytes,
        note="upstream torch path",
    )
    _row(
        "softmax",
        shape,
        "ours",
        _fwd_bwd(lambda: softmax.scale_mask_softmax_forward(module, x, None), dy),
        [x],
        bytes_=nbytes,
    )
    if liger:
        _row(
            "softmax",
            shape,
            "liger",
            _fwd_bwd(lambda: liger["softmax"].apply(x), dy),
            [x],
            bytes_=nbytes,
            note="no mask, no scale",
        )
    torch.cuda.empty_cache()


def bench_cross_entropy(liger, gems: bool) -> None:
    from megatron.core.tensor_parallel.cross_entropy import vocab_parallel_cross_entropy

    s, b, vocab = SEQ, MBS, VOCAB
    x = (3 * torch.randn(s, b, vocab, device=DEV)).to(BF16).requires_grad_(True)
    target = torch.randint(0, vocab, (s, b), device=DEV)
    nbytes = 3 * x.numel() * 2
    shape = f"[{s}, {b}, {vocab}]"
    _row(
        "cross_entropy",
        shape,
        "torch",
        _fwd_bwd(lambda: vocab_parallel_cross_entropy(x, target)),
        [x],
        bytes_=nbytes,
        note="upstream, TP=1",
    )
    _row("cross_entropy", shape, "ours", _fwd_bwd(lambda: ops.cross_entropy(x, target)), [x], bytes_=nbytes)
    if gems:
        from flag_gems import fused as gems_fused  # not routed by the pack (gems.py says why)

        _row(
            "cross_entropy",
            shape,
            "flaggems",
            _fwd_bwd(lambda: gems_fused.cross_entropy_loss(x.view(-1, vocab), target.view(-1), None, "none")),
            [x],
            bytes_=nbytes,
            note="bf16 loss; not routed",
        )
    if liger:
        x2, t2 = x.view(-1, vocab), target.view(-1)
        _row(
            "cross_entropy",
            shape,
            "liger",
            _fwd_bwd(lambda: liger["ce"].apply(x2, t2, None, -100, 0.0, 0.0, "mean")),
            [x],
            bytes_=nbytes,
            note="mean-reduced",
            graph=False,  # its capture failed and left torch's RNG offset broken for what followed
        )
    torch.cuda.empty_cache()


class _GemsAttention(torch.autograd.Function):
    """FlagGems 5.0.2's attention forward/backward with the contiguous [b, h, s, d] tensors they assert."""

    @staticmethod
    def forward(ctx, q, k, v, sm_scale):
        from flag_gems import ops as gems_ops

        qb, kb, vb = (t.permute(1, 2, 0, 3).contiguous() for t in (q, k, v))
        out, lse = gems_ops.scaled_dot_product_attention_forward(qb, kb, vb, None, 0.0, True, sm_scale, True)
        ctx.save_for_backward(qb, kb, vb, out, lse)
        ctx.sm_scale = sm_scale
        return out.permute(2, 0, 1, 3).contiguous()

    @staticmethod
    def backward(ctx, dout):
        from flag_gems import ops as gems_ops

        qb, kb, vb, out, lse = ctx.saved_tensors
        do = dout.permute(1, 2, 0, 3).contiguous()
        dq, dk, dv = gems_ops.scaled_dot_product_attention_backward(
            do, qb, kb, vb, out, lse, None, 0.0, True, ctx.sm_scale, True
        )
        return dq.permute(2, 0, 1, 3), dk.permute(2, 0, 1, 3), dv.permute(2, 0, 1, 3), None


def bench_attention_flaggems() -> None:
    """Last: FlagGems' attention backward hit an illegal memory access here once, which poisons the context."""
    s, b, hq, hkv, d = SEQ, MBS, HQ, HKV, HEAD
    group = hq // hkv
    mixed = torch.randn(s, b, hkv, (group + 2) * d, device=DEV, dtype=BF16, requires_grad=True)

    def run() -> torch.Tensor:
        q = mixed[..., : group * d].reshape(s, b, hq, d)
        k, v = mixed[..., group * d : (group + 1) * d], mixed[..., (group + 1) * d :]
        return _GemsAttention.apply(q, k, v, 1.0 / math.sqrt(d)).view(s, b, -1)

    dout = torch.randn(s, b, hq * d, device=DEV, dtype=BF16)
    flops = 3.5 * 4 * b * hq * s * s * d * 0.5
    _row(
        "attention", f"[{s}, {b}, {hq}/{hkv} heads, {d}] causal", "flaggems", _fwd_bwd(run, dout), [mixed],
        flops=flops, note="incl. permute copies; not routed",
    )  # fmt: skip


def bench_gemm(gems: bool) -> None:
    tokens, hidden = SEQ * MBS, HIDDEN
    shapes = {
        "qkv": (tokens, hidden, (HQ + 2 * HKV) * HEAD), "proj": (tokens, hidden, hidden),
        "fc1": (tokens, hidden, 2 * FFN), "fc2": (tokens, FFN, hidden), "logits": (tokens, hidden, VOCAB),
    }  # fmt: skip
    gems_mm = None
    if gems:
        from flag_gems import ops as gems_ops

        gems_mm = gems_ops.mm
    for name, (m, k, n) in shapes.items():
        a = torch.randn(m, k, device=DEV, dtype=BF16)
        w = torch.randn(k, n, device=DEV, dtype=BF16)
        flops = 2 * m * n * k
        entry: dict[str, object] = {"gemm": name, "mnk": [m, n, k]}
        if DRY:
            torch.mm(a, w)
            continue
        entry["torch_TFLOPs"] = flops / (do_bench(lambda a=a, w=w: torch.mm(a, w), return_mode="median") / 1e3) / 1e12
        if gems_mm is not None:
            try:
                entry["flaggems_TFLOPs"] = (
                    flops / (do_bench(lambda a=a, w=w: gems_mm(a, w), return_mode="median") / 1e3) / 1e12
                )
            except Exception as exc:  # noqa: BLE001
                entry["flaggems_error"] = repr(exc)[:200]
        RESULTS["gemm"].append(entry)
        print("  gemm", entry, flush=True)
    torch.cuda.empty_cache()


def _fmt(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else ""


def markdown() -> str:
    """The op table: GPU time from CUDA-graph replay (launch overhead excluded), eager time beside it."""
    copy = RESULTS["copy_TBps"]
    lines = [
        f"Device: {RESULTS['device']}; copy bandwidth (read+write) measured in this run: {copy:.2f} TB/s. "
        "bf16, forward+backward. 'stream': GPU time inside a stream of work (16 calls in one CUDA graph, "
        "L2 flushed before each, flushes subtracted); 'graph': one CUDA-graph replay of one call (adds the "
        "graph's launch latency, 4-6 us); 'eager': plain calls (Python and launch overhead included), median "
        "of triton.testing.do_bench. 'vs torch' compares stream to stream (eager to eager where a graph could "
        "not be captured); bandwidth and TFLOP/s use the stream time, 'same-bytes copy' is a torch copy "
        "kernel of as many bytes, timed the same way.",
        "",
        "| op | shape | impl | stream ms | graph ms | eager ms | vs torch | TB/s | % of copy | same-bytes copy ms "
        "| TFLOP/s | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = {(r["op"], r["shape"]): r for r in RESULTS["ops"] if r["impl"] == "torch"}
    for r in RESULTS["ops"]:
        if "ms" not in r:
            lines.append(f"| {r['op']} | {r['shape']} | {r['impl']} | error | | | | | | | | {r['error'][:60]} |")
            continue
        t = base.get((r["op"], r["shape"]), {})
        if "stream_ms" in r and "stream_ms" in t:
            speed = f"{t['stream_ms'] / r['stream_ms']:.2f}x"
        elif "graph_ms" in r and "graph_ms" in t:
            speed = f"{t['graph_ms'] / r['graph_ms']:.2f}x (graph)"
        elif "eager_ms" in t:
            speed = f"{t['eager_ms'] / r['eager_ms']:.2f}x (eager)"
        else:
            speed = ""
        pct = f"{100 * r['TBps'] / copy:.0f}%" if "TBps" in r else ""
        note = r["note"] + (f" graph: {r['graph_error'][:40]}" if "graph_error" in r else "")
        lines.append(
            f"| {r['op']} | {r['shape']} | {r['impl']} | {_fmt(r.get('stream_ms'), '.3f')} "
            f"| {_fmt(r.get('graph_ms'), '.3f')} | {r['eager_ms']:.3f} "
            f"| {speed} | {_fmt(r.get('TBps'), '.2f')} | {pct} | {_fmt(r.get('copy_same_bytes_ms'), '.3f')} "
            f"| {_fmt(r.get('TFLOPs'), '.0f')} | {note} |"
        )
    if RESULTS["gemm"]:
        lines += ["", "| GEMM (bf16) | M x N x K | torch (cuBLAS) TFLOP/s | FlagGems mm TFLOP/s |", "|---|---|---|---|"]
        for g in RESULTS["gemm"]:
            m, n, k = g["mnk"]
            fg = f"{g['flaggems_TFLOPs']:.0f}" if "flaggems_TFLOPs" in g else g.get("flaggems_error", "n/a")[:40]
            lines.append(f"| {g['gemm']} | {m} x {n} x {k} | {g['torch_TFLOPs']:.0f} | {fg} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="gpu_ops.json")
    parser.add_argument("--md", default="gpu_ops.md")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on a CPU with TRITON_INTERPRET=1")
    args = parser.parse_args()
    if args.dry_run:
        global DEV, DRY, SEQ, MBS, HIDDEN, HQ, HKV, HEAD, FFN, VOCAB, NORM_SHAPES
        DEV, DRY = "cpu", True
        SEQ, MBS, HIDDEN, HQ, HKV, HEAD, FFN, VOCAB = 32, 2, 64, 4, 2, 16, 48, 500
        NORM_SHAPES = ((33, 64), (17, 48))
    skip = set(filter(None, args.skip.split(",")))
    t0 = time.time()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if not DRY:
        torch.cuda.set_device(0)
    torch.distributed.init_process_group("gloo" if DRY else "nccl", rank=0, world_size=1)
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(1, 1)
    if not DRY:
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        model_parallel_cuda_manual_seed(0)  # upstream attention forks the model-parallel RNG for dropout
    RESULTS["device"] = "cpu (dry run)" if DRY else torch.cuda.get_device_name()
    RESULTS["versions"] = {"torch": torch.__version__, "triton": triton.__version__}
    RESULTS["copy_TBps"] = copy_bandwidth()
    print(f"copy bandwidth {RESULTS['copy_TBps']:.2f} TB/s", flush=True)
    liger = _liger()
    gems = _has_gems()
    sections = {
        "norms": lambda: bench_norms(liger, gems), "swiglu": lambda: bench_swiglu(liger, gems),
        "rope": lambda: bench_rope(liger), "qkv_rope": bench_qkv_rope, "attention": lambda: bench_attention(gems),
        "attention_configs": bench_attention_configs, "optimizer": bench_optimizer, "launch": bench_launch,
        "softmax": lambda: bench_softmax(liger), "cross_entropy": lambda: bench_cross_entropy(liger, gems),
        "gemm": lambda: bench_gemm(gems),
        "attention_flaggems": (lambda: bench_attention_flaggems()) if gems else (lambda: None),
    }  # fmt: skip
    for name, section in sections.items():
        if name in skip:
            continue
        print(f"[{name}] {time.time() - t0:.0f}s", flush=True)
        try:
            section()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        with open(args.out, "w") as f:
            json.dump(RESULTS, f, indent=1)
    table = markdown()
    with open(args.md, "w") as f:
        f.write(table + "\n")
    print(table, flush=True)
    print(f"bench done in {time.time() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
