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
- Host code uses ``cdiv``/``next_power_of_2`` from here, not triton's: in triton 3.6
  those are ``constexpr_function`` objects whose call unwraps every argument and reads
  a knob, about 8 us a call on a 2-core CPU, twelve of them an RMSNorm forward+backward.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .._runtime import deterministic, interpreting

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE

__all__ = [
    "LEAN_STATS",
    "SETTINGS",
    "TUNE_BUDGET",
    "TUNE_STORE",
    "LaunchSettings",
    "TuneBudget",
    "TuneStore",
    "cdiv",
    "graph_timed",
    "launch",
    "multiprocessors",
    "next_power_of_2",
    "reload_settings",
    "rows",
    "run",
]


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host code (triton.cdiv is a constexpr function: slow to call from Python)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n (0 for 0, as triton's), for host code."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


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


DEFAULT_TUNE_BUDGET_S = 5.0
"""Why 5 s: without stored picks (no seeds for this card and triton, an empty store), tuning every kernel a model
meets took 20.6 s of its first step on an H200 (docs/gpu_pack.md, "Cold start"); compiling one config costs about
0.2-0.35 s there, so 5 s tunes the kernels with few configs and leaves the rest on their fixed config, and the
first step stays near the 10 s the cold-start goal allows. Picks tuned later (a run with a larger budget, or
``FL_GEMS_TUNE_UNSEEN=1``) persist in the store for every later process."""


@dataclass(frozen=True)
class LaunchSettings:
    """The launch knobs, read from the environment when the kernels load (``reload_settings()`` reads again).

    Not read at every launch: an ``os.environ`` lookup costs about 3 us of Python, and a
    forward+backward of a norm asked for five of them.
    """

    autotune: bool  # FL_GEMS_AUTOTUNE=0: one fixed config per kernel (tests: far fewer compiles)
    lean: bool  # FL_GEMS_LEAN_LAUNCH=0: every launch through triton's own path
    tune_unseen: bool = False  # FL_GEMS_TUNE_UNSEEN=1: tune a shape no pick is stored for, instead of borrowing
    # FL_GEMS_TUNE_BUDGET_S: seconds this process may spend autotuning (default 5; unbounded with
    # FL_GEMS_TUNE_UNSEEN=1 unless set; "inf" for none): a kernel whose tuning would not fit runs its fixed config
    tune_budget_s: float = 5.0

    @classmethod
    def from_env(cls) -> LaunchSettings:
        interpret = interpreting()
        tune_unseen = os.environ.get("FL_GEMS_TUNE_UNSEEN", "0") == "1"
        budget = os.environ.get("FL_GEMS_TUNE_BUDGET_S", "inf" if tune_unseen else str(DEFAULT_TUNE_BUDGET_S))
        return cls(
            autotune=os.environ.get("FL_GEMS_AUTOTUNE", "1") != "0" and not interpret,
            lean=os.environ.get("FL_GEMS_LEAN_LAUNCH", "1") != "0" and not interpret,
            tune_unseen=tune_unseen,
            tune_budget_s=float(budget),
        )


SETTINGS = LaunchSettings.from_env()


def reload_settings() -> LaunchSettings:
    """Read ``FL_GEMS_AUTOTUNE`` and ``FL_GEMS_LEAN_LAUNCH`` again (after a change in this process)."""
    global SETTINGS
    SETTINGS = LaunchSettings.from_env()
    return SETTINGS


# ------------------------------------------------------------------------- lean launches
# A launch through triton's ``kernel[grid](...)`` binds every argument, computes its
# specialization, looks the compiled kernel up, and (through ``triton.autotune``) builds
# dicts of every argument and config: about 0.1-0.2 ms of Python a launch, measured on an
# H200's host as RMSNorm forward+backward taking 0.96 ms eager for 0.05 ms of GPU work.
# Here the first call at a given argument signature goes through triton (compiling and,
# where asked, tuning), and the compiled kernel, its grid and the constexprs are kept under
# that signature; later calls hand the arguments straight to the compiled kernel's launcher.
# The signature holds every integer exactly (shapes, strides: triton specializes on their
# divisibility by 16 and on the value 1) and, per tensor, its dtype and whether its address
# is 16-byte aligned (triton's pointer specialization), so a call is only ever run by a
# kernel compiled for what it passes.
_LEAN: dict[tuple, tuple] = {}
LEAN_STATS = {"lean": 0, "triton": 0}  # launches each way (tests and the bench read them)
_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "launch_pdl"})


def _signature(args: tuple, kwargs: dict) -> tuple:
    # Ints and bools as they are (triton specializes on them), floats by type (passed by value,
    # never specialized), tensors by dtype and 16-byte alignment; a call site passes its
    # keywords in one order. Class identity first: isinstance on every argument cost more.
    return (
        *[
            a
            if (c := a.__class__) is int or c is bool
            else float
            if c is float
            else (a.dtype, not a.data_ptr() & 15)
            if isinstance(a, torch.Tensor)
            else a
            for a in args
        ],
        *kwargs.items(),
    )


def _jit(kernel: Any) -> Any:
    while not hasattr(kernel, "params"):
        kernel = kernel.fn
    return kernel


def _grid3(grid: tuple[int, ...]) -> tuple[int, int, int]:
    return (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)


def _remember(site: tuple, compiled: Any, kernel: Any, nargs: int, constexprs: dict, meta: dict) -> None:
    """Keep what a repeated launch needs: the compiled kernel and the values of the trailing constexprs.

    Not the grid: a grid can depend on sizes that are no kernel argument (RoPE's grid has one
    program row per position, and the sequence length is passed to no kernel), so every
    launch computes its own from the call's grid function and the kept constexprs.
    """
    if compiled is None or not hasattr(compiled, "packed_metadata"):
        return
    tail = []
    for param in _jit(kernel).params[nargs:]:
        if param.name in constexprs:
            tail.append(constexprs[param.name])
        elif param.default is not inspect.Parameter.empty:
            tail.append(param.default)
        else:
            return  # an argument this call did not give: leave it to triton
    if len(_LEAN) > 4096:
        _LEAN.clear()
    _LEAN[site] = (compiled, tuple(tail), meta, constexprs)


_TRITON: list = []  # (triton.knobs, the active driver), bound at the first lean launch


def _hooks_wanted(knobs: Any) -> bool:
    """Whether a launch hook is installed (triton 3.6 keeps them in chains that are empty by default)."""
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


def _run_lean(entry: tuple, args: tuple, grid: tuple[int, int, int], device: int) -> bool:
    if not _TRITON:
        from triton import knobs
        from triton.runtime.driver import driver

        _TRITON.extend((knobs, driver.active))
    knobs, active = _TRITON
    if _hooks_wanted(knobs):
        return False  # a profiler's hooks: triton's own path calls them
    compiled, tail = entry[0], entry[1]
    stream = active.get_current_stream(device)
    # no hooks: the launcher skips them (None), and no launch metadata is built
    compiled.run(*grid, stream, compiled.function, compiled.packed_metadata, None, None, None, *args, *tail)
    return True


def run(kernel: Any, grid: tuple[int, ...], *args: object, **kwargs: object) -> None:
    """``kernel[grid](*args, **kwargs)`` (constexprs and ``num_warps`` in ``kwargs``), lean when repeated."""
    lean = SETTINGS.lean
    if lean:
        device = torch.cuda.current_device()
        site = (id(kernel), device, _signature(args, kwargs))
        entry = _LEAN.get(site)
        if entry is not None and _run_lean(entry, args, _grid3(grid), device):
            LEAN_STATS["lean"] += 1
            return
    LEAN_STATS["triton"] += 1
    compiled = kernel[grid](*args, **kwargs)
    if lean:
        constexprs = {k: v for k, v in kwargs.items() if k not in _OPTIONS}
        _remember(site, compiled, kernel, len(args), constexprs, {})


def launch(
    kernel: Any,
    tuned: Any,  # a triton autotuner, or None (Any: triton has no types)
    grid: Callable[[dict], tuple[int, ...]],
    default: dict,
    *args: object,
    **kwargs: object,
) -> dict:
    """Run ``tuned`` (an autotuner over ``kernel``) or ``kernel`` with ``default``; returns the meta-parameters used.

    ``default`` holds the constexpr meta-parameters plus ``num_warps``/``num_stages``:
    the config of the fixed path, also the first of every autotune list. ``tuned`` None:
    always the fixed config. Autotune results persist on disk (``TUNE_STORE``); a
    repeated call at the same argument signature launches the compiled kernel directly
    (the grid is computed again for every call).
    """
    settings = SETTINGS
    # deterministic mode: the fixed config everywhere (a pick timed on this machine may
    # differ on the next and change a reduction's order)
    tune = tuned is not None and settings.autotune and not deterministic()
    lean = settings.lean
    if lean:
        device = torch.cuda.current_device()
        site = (id(tuned) if tune else id(kernel), tune, device, _signature(args, kwargs))
        entry = _LEAN.get(site)
        if entry is not None and _run_lean(entry, args, _grid3(grid(entry[3])), device):
            LEAN_STATS["lean"] += 1
            return entry[2]
    LEAN_STATS["triton"] += 1
    if tune:
        TUNE_STORE.load(tuned)
        if not settings.tune_unseen:
            TUNE_STORE.borrow_nearest(tuned, args, kwargs)
        tune = TUNE_BUDGET.allows(tuned, args, kwargs, settings.tune_budget_s)
    if tune:
        known = len(tuned.cache)
        start = time.perf_counter()
        compiled = tuned[grid](*args, **kwargs)
        config = tuned.best_config
        if len(tuned.cache) != known:
            TUNE_BUDGET.charge(tuned, time.perf_counter() - start)
            TUNE_STORE.save(tuned)
        meta = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    else:
        compiled = kernel[grid(default)](*args, **kwargs, **default)
        meta = default
    if lean:
        constexprs = {k: v for k, v in {**kwargs, **meta}.items() if k not in _OPTIONS}
        _remember(site, compiled, kernel, len(args), constexprs, meta)
    return meta


# ------------------------------------------------------------------------- the tuning budget
class TuneBudget:
    """How long this process has spent autotuning, and whether one more kernel's tuning fits the budget.

    Why: a shape with no stored pick and none to borrow (a card of another SM family, another triton, an empty store)
    is tuned on the first step, every config of every kernel compiled and timed: 20.6 s on an H200 for the 1.31B
    stand-in, 21.1 s reported on an H100 that had no seeds. A tuning is estimated before it starts (its configs times
    the seconds a config has cost so far in this process, 0.3 s until measured); one that does not fit what is left
    of ``FL_GEMS_TUNE_BUDGET_S`` runs the kernel's fixed config (the config ``FL_GEMS_AUTOTUNE=0`` runs), said once
    per kernel. Deterministic mode never tunes; this only bounds the default mode.
    """

    def __init__(self) -> None:
        self.spent = 0.0
        self.per_config = 0.3
        self._tuned_configs = 0

    def allows(self, tuned: Any, args: tuple, kwargs: dict, budget: float) -> bool:
        key = autotune_key(tuned, args, kwargs)
        if key is None or key in tuned.cache or math.isinf(budget):
            return True  # a stored or borrowed pick (nothing to tune), or no budget
        estimate = len(getattr(tuned, "configs", ())) * self.per_config
        if self.spent + estimate <= budget:
            return True
        from .._runtime import note_once

        note_once(
            "autotune",
            f"{_jit(tuned).__name__}: tuning ({estimate:.1f} s estimated) does not fit what is left of the autotuning "
            f"budget ({budget:g} s, {self.spent:.1f} s spent; FL_GEMS_TUNE_BUDGET_S): its fixed config runs",
        )
        return False

    def charge(self, tuned: Any, seconds: float) -> None:
        self.spent += seconds
        self._tuned_configs += max(1, len(getattr(tuned, "configs", ())))
        self.per_config = max(self.spent / self._tuned_configs, 0.01)


TUNE_BUDGET = TuneBudget()


# ------------------------------------------------------------------------- autotune results on disk
class TuneStore:
    """Autotune picks kept on disk, so a new process (a restart, every rank of a job) does not tune again.

    One JSON file per (device name, compute capability, triton version) under
    ``FL_GEMS_CACHE_DIR`` (default ``~/.cache/fl_patch/flaggems``); inside it, per kernel
    (its name, a hash of its source and of its config list), the autotuner's key (the
    key arguments' values and every tensor argument's dtype) and the config it picked.
    A kernel whose source or config list changed starts afresh; a loaded pick must be one
    of the kernel's configs. ``FL_GEMS_AUTOTUNE_CACHE=0`` turns it off. Writes merge with
    what is there and replace the file atomically (ranks tuning at once lose nothing but
    a duplicate tuning).

    Seeds: the pack ships picks measured on the devices of docs/gpu_pack.md, in files of
    the same name under ``src/fl_patch/impls/flaggems/tuned/``; they are read after the user's
    file (whose picks win) and never written. They apply on that device name, or on another card
    of its SM family (same compute capability and triton version: :meth:`seed_paths`), for that
    kernel source and config list, so a fresh Hopper card compiles one config per kernel instead
    of tuning. ``FL_GEMS_AUTOTUNE_SEED=0``: no seeds.
    """

    SEED_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tuned")

    def __init__(self, device: str | None = None, seed_dir: str | None = None) -> None:
        self._device = device
        self._seed_dir = seed_dir or self.SEED_DIR
        self._loaded: set[int] = set()
        self._borrowed: set[tuple[int, tuple]] = set()  # (id of the autotuner, key): picks lent, not measured

    @staticmethod
    def enabled() -> bool:
        return os.environ.get("FL_GEMS_AUTOTUNE_CACHE", "1") != "0"

    def device(self) -> str:
        if self._device is None:
            import triton

            index = torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(index)
            self._device = f"{torch.cuda.get_device_name(index)}-sm{major}{minor}-triton{triton.__version__}"
        return self._device

    def file_name(self) -> str:
        name = "".join(c if c.isalnum() or c in "-._" else "_" for c in self.device())
        return f"autotune-{name}.json"

    def path(self) -> str:
        default = os.path.join(os.path.expanduser("~"), ".cache", "fl_patch", "flaggems")
        return os.path.join(os.environ.get("FL_GEMS_CACHE_DIR") or default, self.file_name())

    def seed_path(self) -> str:
        return os.path.join(self._seed_dir, self.file_name())

    def seed_paths(self) -> list[str]:
        """The seed files this device reads: its own (device name), then those of other cards of its SM family (the
        same compute capability and triton version: an H100 reads the H200's picks), in name order.

        Why the family: the picks are tile shapes and warp counts for one SM architecture; Hopper cards differ in
        memory bandwidth and clocks, not in what a config compiles to, so another sm90 card's pick is a measured
        pick for this one's shape, where tuning from nothing cost an H100 21.1 s of its first step."""
        exact = self.seed_path()
        paths = [exact] if os.path.isfile(exact) else []
        _, sep, family = self.file_name().rpartition("-sm")
        if not sep:
            return paths
        try:
            names = sorted(os.listdir(self._seed_dir))
        except OSError:
            return paths
        for name in names:
            path = os.path.join(self._seed_dir, name)
            if name.startswith("autotune-") and name.endswith(sep + family) and path != exact:
                paths.append(path)
        return paths

    @staticmethod
    def kernel_id(tuned: Any) -> str:
        jit = _jit(tuned)
        digest = hashlib.sha256((jit.src + "\n" + "\n".join(map(str, tuned.configs))).encode()).hexdigest()[:16]
        return f"{jit.__name__}-{digest}"

    def _read(self, path: str | None = None) -> dict:
        try:
            with open(path or self.path()) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @staticmethod
    def _config_dict(config: Any) -> dict:
        return {"kwargs": dict(config.kwargs), "num_warps": config.num_warps, "num_stages": config.num_stages}

    def load(self, tuned: Any) -> int:
        """Put the stored picks for ``tuned``'s kernel into its cache (once a process); returns how many."""
        if id(tuned) in self._loaded or not self.enabled():
            return 0
        self._loaded.add(id(tuned))
        kernel = self.kernel_id(tuned)
        entries = list(self._read().get(kernel, []))
        if os.environ.get("FL_GEMS_AUTOTUNE_SEED", "1") != "0":
            for seed in self.seed_paths():
                entries += self._read(seed).get(kernel, [])
        by_dict = {json.dumps(self._config_dict(c), sort_keys=True): c for c in tuned.configs}
        count = 0
        for key, config in entries:
            match = by_dict.get(json.dumps(config, sort_keys=True))
            if match is not None:
                tuned.cache.setdefault(tuple(key), match)
                count += 1
        return count

    def borrow_nearest(self, tuned: Any, args: tuple, kwargs: dict) -> bool:
        """For a shape no pick is stored for, the pick of the nearest stored shape; whether one was borrowed.

        Why: tuning a new shape compiles and times every config of every kernel it meets, on
        the first step (9-15 s on an H200 for a model with unseen hidden/ffn/seq sizes:
        docs/gpu_pack.md). The best config of a memory-bound row kernel changes slowly with
        the sizes, so the pick for the nearest measured shape (same dtypes and flags, sizes
        nearest on a log scale) is a good one; the borrowed pick is used for this shape and
        never written to disk as if measured. ``FL_GEMS_TUNE_UNSEEN=1`` tunes instead. With
        nothing stored for the kernel, or a triton whose autotuner keys differently (the key
        below is rebuilt as triton 3.x's ``Autotuner.run`` builds it), the autotuner tunes as
        before.
        """
        key = autotune_key(tuned, args, kwargs)
        cache = tuned.cache
        if key is None or key in cache or not cache:
            return False
        nearest = _nearest_key(key, [k for k in cache if (id(tuned), k) not in self._borrowed])
        if nearest is None:
            return False
        cache[key] = cache[nearest]
        self._borrowed.add((id(tuned), key))
        return True

    def save(self, tuned: Any) -> None:
        """Merge ``tuned``'s picks into the file (borrowed ones are not measurements: left out)."""
        if not self.enabled():
            return
        path = self.path()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            data = self._read()
            stored = {json.dumps(k): c for k, c in data.get(self.kernel_id(tuned), [])}
            for key, config in tuned.cache.items():
                if (id(tuned), key) in self._borrowed:
                    continue
                stored[json.dumps(list(key))] = self._config_dict(config)
            data[self.kernel_id(tuned)] = [[json.loads(k), c] for k, c in sorted(stored.items())]
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(data, f, indent=0, sort_keys=True)
            os.replace(tmp, path)
        except OSError as exc:
            from .._runtime import LOG

            LOG.warning("fl_patch flaggems: autotune results not saved to %s: %s", path, exc)


TUNE_STORE = TuneStore()


def autotune_key(tuned: Any, args: tuple, kwargs: dict) -> tuple | None:
    """The cache key triton 3.x's ``Autotuner.run`` computes for this call (None if ``tuned`` is not one)."""
    arg_names = getattr(tuned, "arg_names", None)
    keys = getattr(tuned, "keys", None)
    if not isinstance(arg_names, list) or not isinstance(keys, list):
        return None
    named = {**dict(zip(arg_names, args, strict=False)), **kwargs}  # (args may stop short of arg_names)
    present = {k: v for k, v in named.items() if k in arg_names}
    key: list[object] = [present[k] for k in keys if k in present]
    key.extend(str(v.dtype) for v in present.values() if hasattr(v, "dtype"))
    return tuple(key)


def _nearest_key(key: tuple, stored: list[tuple]) -> tuple | None:
    """The stored key of the same form (length, every non-size part equal) nearest to ``key`` in log2 of its sizes."""

    def sizes(k: tuple) -> list[float] | None:
        out = []
        for part, mine in zip(k, key, strict=True):
            if isinstance(mine, bool) or not isinstance(mine, int):
                if part != mine:
                    return None  # a dtype, a flag, a mode: only the same one is comparable
            elif isinstance(part, int) and not isinstance(part, bool):
                out.append(abs(math.log2(part + 1) - math.log2(mine + 1)))
            else:
                return None
        return out

    best: tuple[float, tuple] | None = None
    for candidate in stored:
        if len(candidate) != len(key):
            continue
        distance = sizes(candidate)
        if distance is not None and (best is None or sum(distance) < best[0]):
            best = (sum(distance), candidate)
    return best[1] if best is not None else None


_L2_FLUSH_BYTES = 256 * 1024**2  # over the L2 of any current GPU (H200: 50 MB), as triton's do_bench


def graph_timed(kernel_call: Callable[[], object], quantiles: list[float] | None = None, calls: int = 16) -> object:
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


def _capture(work: Callable[[], object], pool: _POOL_HANDLE) -> torch.cuda.CUDAGraph:
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
