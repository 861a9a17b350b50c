"""This project's Triton kernels, each wrapped in a ``torch.autograd.Function``.

Importing any module here imports triton: the megatron-facing impls import them
only when a call can run on them (``_runtime.kernel_unavailable`` says when), so the
pack's registry and impl modules load on machines without triton.

Shared conventions, and why:
- Every kernel takes explicit strides for what it reads and writes, so a strided
  view (a non-contiguous ``dy``, the query slice of a fused QKV projection) is read
  where it lies instead of being copied, and never read as if it were contiguous
  (the bug of FlagGems 5.0.2's ``rms_norm_backward``/``layer_norm_backward``).
  The last dimension must have stride 1; a tensor whose last dimension does not is
  copied once (``rows()``).
- Arithmetic is in fp32 whatever the storage dtype; outputs are rounded once.
- Row statistics saved for backward (rstd, mean, log-sum-exp) are fp32.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch

from .._runtime import interpreting

__all__ = ["autotune_enabled", "graph_timed", "launch", "multiprocessors", "rows"]


def rows(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """``tensor`` as a 2-D [rows, width] tensor whose last dimension has stride 1 (a view when possible)."""
    flat = tensor.reshape(-1, width)
    if flat.stride(-1) != 1 and width > 1:
        flat = flat.contiguous()
    return flat


@functools.lru_cache(maxsize=8)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def multiprocessors(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (1 for the CPU interpreter); cached, it is asked every call."""
    if device.type != "cuda":
        return 1
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


def autotune_enabled() -> bool:
    """Autotune on a GPU unless ``FL_GEMS_AUTOTUNE=0`` (tests: one fixed config, far fewer compiles)."""
    return os.environ.get("FL_GEMS_AUTOTUNE", "1") != "0" and not interpreting()


def launch(
    kernel: object,
    tuned: object,
    grid: Callable[[dict], tuple[int, ...]],
    default: dict,
    *args: object,
    **kwargs: object,
) -> dict:
    """Run ``tuned`` (an autotuner over ``kernel``) or ``kernel`` with ``default``; returns the meta-parameters used.

    ``default`` holds the constexpr meta-parameters plus ``num_warps``/``num_stages``:
    the config of the fixed path, also the first of every autotune list.
    """
    if autotune_enabled():
        tuned[grid](*args, **kwargs)
        config = tuned.best_config
        return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    kernel[grid(default)](*args, **kwargs, **default)
    return default


_L2_FLUSH_BYTES = 256 * 1024**2  # over the L2 of any current GPU (H200: 50 MB), as triton's do_bench


def graph_timed(kernel_call: Callable[[], None], quantiles: list[float] | None = None, calls: int = 16) -> object:
    """Autotuner benchmark: GPU time of one ``kernel_call``, host launch overhead left out.

    triton's default ``do_bench`` times eager calls. A kernel of 10-60 us (the norms
    and RoPE at a ~1B model's shapes) runs shorter than its Python launch (and a
    post-hook's), so the GPU waits on the host and every config measures about the
    same: the tuner then picks by noise (seen on an H200: RMSNorm at [8192, 2048] took
    59 us with one pick, 79 us with another). Here ``calls`` calls, each after an L2
    flush, are captured in one CUDA graph; a graph of the flushes alone is subtracted.
    """
    flush = torch.empty(_L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    pool = torch.cuda.graph_pool_handle()
    with torch.cuda.stream(stream):
        kernel_call()  # compiles outside the capture
        with_calls = _capture(lambda: [(flush.zero_(), kernel_call()) for _ in range(calls)], pool)
        flushes_only = _capture(lambda: [flush.zero_() for _ in range(calls)], pool)
        times = []
        for _ in range(7):
            times.append(max(_replay_ms(with_calls, stream) - _replay_ms(flushes_only, stream), 0.0) / calls)
    torch.cuda.current_stream().wait_stream(stream)
    with_calls.reset()
    flushes_only.reset()
    times.sort()
    if quantiles is None:
        return times[len(times) // 2]
    return [times[min(len(times) - 1, int(q * len(times)))] for q in quantiles]


def _capture(work: Callable[[], object], pool: tuple) -> torch.cuda.CUDAGraph:
    """``work`` captured on the current stream, thread-local.

    Not ``torch.cuda.graph(...)``: entering it synchronizes and empties the caching
    allocator (``torch.cuda.empty_cache()``; some torch versions also ``gc.collect()``),
    so a training process gives back its cached blocks and allocates them again for
    every config tuned: with it, the first step of the 0.85 B GPT took 45 s instead of
    9. Thread-local, because backward kernels are tuned on autograd's thread while
    other threads may use CUDA.
    """
    graph = torch.cuda.CUDAGraph()
    graph.capture_begin(pool=pool, capture_error_mode="thread_local")
    try:
        work()
    finally:
        graph.capture_end()
    return graph


def _replay_ms(graph: torch.cuda.CUDAGraph, stream: torch.cuda.Stream) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    graph.replay()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end)
