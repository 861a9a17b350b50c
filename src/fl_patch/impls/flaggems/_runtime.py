"""What every op of the FlagGems pack shares: where a kernel may run, which backend, and saying once why not.

Why: each impl replaces an upstream megatron-core function for the cases its kernel
covers and hands every other call back to upstream (``fl_patch.original``). A fallback
that nobody hears about is a silent slowdown; one that logs every step floods the log.
So each (op, reason) pair is logged once, at WARNING, and counted in ``FALLBACKS``
(tests read the counts; ``fallback_summary()`` prints them).

How: nothing here imports triton or flag_gems. ``kernel_unavailable(...)`` says why
this project's Triton kernels cannot take a call (a tensor not on CUDA, triton
missing), ``backend(op)`` which implementation serves an op (``FL_GEMS_BACKEND``).
With ``TRITON_INTERPRET=1`` CPU tensors are accepted, so the kernels' logic is
checked on a machine with no GPU (the interpreter runs them with numpy).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

__all__ = [
    "BACKENDS",
    "FALLBACKS",
    "LOG",
    "backend",
    "fallback",
    "fallback_summary",
    "interpreting",
    "kernel_unavailable",
    "later_parameters_reason",
    "note_once",
    "reset_fallbacks",
    "use_backend",
]

LOG = logging.getLogger("fl_patch.flaggems")

# Which implementation serves each op by default: "triton" is this project's kernel
# (src/fl_patch/impls/flaggems/kernels), "flaggems" the FlagGems 5.0.2 kernel behind a
# wrapper (gems.py). The choice per op, with the measurements behind it, is in
# docs/gpu_pack.md; FL_GEMS_BACKEND="rms_norm=flaggems,attention=triton" overrides it.
BACKENDS: dict[str, tuple[str, ...]] = {
    "rms_norm": ("triton", "flaggems"),
    "layer_norm": ("triton", "flaggems"),
    "swiglu": ("triton", "flaggems"),
    "rope": ("triton",),
    "qkv_rope": ("triton",),  # megatron's fused_single_qkv_rope path (FlagGems 5.0.2 has none)
    # cuDNN's fused attention through torch SDPA, else this project's Triton kernel (FlagGems 5.0.2's:
    # always-causal backward, illegal memory access on H200)
    "attention": ("cudnn", "triton"),
    "softmax": ("triton",),
    "cross_entropy": ("triton",),  # FlagGems 5.0.2's: bf16 loss, other semantics off-vocab, crash on strided rows
    "moe_permute": ("triton",),  # --moe-permute-fusion (FlagGems 5.0.2 has no MoE permutation)
    "moe_unpermute": ("triton",),
    "moe_row_map": ("triton",),
    "moe_sort_chunks": ("triton",),
}
DEFAULT_BACKEND: dict[str, str] = {op: names[0] for op, names in BACKENDS.items()}

FALLBACKS: dict[tuple[str, str], int] = {}
_lock = threading.Lock()
_overrides: dict[str, str] | None = None
_forced: dict[str, str] = {}


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


_triton_found = False  # once found, not looked up again (asked at every call: find_spec costs microseconds)


def _has_triton() -> bool:
    global _triton_found
    if not _triton_found:
        _triton_found = importlib.util.find_spec("triton") is not None
    return _triton_found


def kernel_unavailable(*tensors: object) -> str | None:
    """None if this project's Triton kernels can run on ``tensors``, else the reason they cannot."""
    for tensor in tensors:
        device = getattr(tensor, "device", None)
        if device is None:
            continue
        if device.type == "cuda" or (device.type == "cpu" and interpreting()):
            continue
        return f"input on {device.type} (the kernels need CUDA)"
    if not _has_triton():
        return "triton is not installed"
    return None


_DETERMINISTIC_ENV = os.environ.get("FL_PATCH_DETERMINISTIC", "") == "1"
_deterministic_config = False  # a model config with deterministic_mode=True was built in this process


def later_parameters_reason(names: tuple[str, ...], args: tuple[object, ...], kwargs: dict[str, object]) -> str | None:
    """Why a call that set parameters of a later megatron release must run upstream, or None.

    A pack function replaces one of megatron's at every supported release, so it takes the
    parameters later releases added (``names``, in upstream's positional order, after the ones
    the pack knows) as ``*args``/``**kwargs``. Left at None they change nothing; set, they ask
    for behaviour the kernel does not have, and the call goes to upstream as passed.
    """
    if not args and not kwargs:
        return None  # every call of the releases before: nothing to build on the per-call path
    extra = dict(zip(names, args, strict=False)) | kwargs
    if len(args) > len(names):
        extra["<more positional arguments>"] = args[len(names) :]
    return ", ".join(f"{name}={value!r}" for name, value in extra.items() if value is not None) or None


def note_config(config: object) -> None:
    """Latch deterministic mode on when a module is built from a config with ``deterministic_mode=True``.

    A megatron-core-only script sets ``TransformerConfig(deterministic_mode=True)`` without
    touching torch's global flag; the norms are built (and see the config) before any kernel
    runs, so the first launch already takes the deterministic path.
    """
    global _deterministic_config
    if not _deterministic_config and getattr(config, "deterministic_mode", False):
        _deterministic_config = True
        LOG.info("fl_patch flaggems: deterministic mode (the model config asks for it)")


def deterministic() -> bool:
    """Whether the pack must give bit-identical results run to run.

    On with ``FL_PATCH_DETERMINISTIC=1``, with torch's ``use_deterministic_algorithms(True)``
    (what Megatron-LM's ``--deterministic-mode`` sets, megatron/training/determinism.py),
    or after a model config with ``deterministic_mode=True`` was built. Then every kernel
    runs its fixed config (an autotune pick, timed anew on each machine, can change a
    reduction's order) and attention runs the pack's Triton kernels (their backward
    writes dq and dk/dv from separate programs, no atomics) instead of cuDNN's.
    """
    if _DETERMINISTIC_ENV or _deterministic_config:
        return True
    import torch

    return torch.are_deterministic_algorithms_enabled()


def backend(op: str) -> str:
    """The implementation chosen for ``op``: ``FL_GEMS_BACKEND`` entry, else the default."""
    global _overrides
    forced = _forced.get(op)
    if forced is not None:
        return forced
    if _overrides is None:
        parsed: dict[str, str] = {}
        for item in os.environ.get("FL_GEMS_BACKEND", "").split(","):
            name, _, value = item.partition("=")
            name, value = name.strip(), value.strip().lower()
            if not name:
                continue
            if name not in BACKENDS or value not in BACKENDS[name]:
                LOG.warning(
                    "fl_patch flaggems: FL_GEMS_BACKEND entry %r ignored (ops and backends: %s)",
                    item,
                    "; ".join(f"{k}={'|'.join(v)}" for k, v in BACKENDS.items()),
                )
                continue
            parsed[name] = value
        _overrides = parsed
    return _overrides.get(op, DEFAULT_BACKEND[op])


def fallback(op: str, reason: str) -> None:
    """Record that ``op`` ran upstream's code for ``reason``; log it the first time only."""
    key = (op, reason)
    with _lock:
        count = FALLBACKS.get(key, 0)
        FALLBACKS[key] = count + 1
    if count == 0:
        LOG.warning("fl_patch flaggems: %s runs upstream megatron-core: %s (logged once)", op, reason)


_notes: set[tuple[str, str]] = set()


def note_once(op: str, message: str) -> None:
    """Say once that ``op`` runs another of the pack's own backends than the chosen one (not an upstream fallback)."""
    key = (op, message)
    with _lock:
        if key in _notes:
            return
        _notes.add(key)
    LOG.warning("fl_patch flaggems: %s: %s (logged once)", op, message)


def fallback_summary() -> list[str]:
    """One line per (op, reason) that fell back, with how many calls did."""
    with _lock:
        items = sorted(FALLBACKS.items())
    return [f"{op}: {reason} ({count} calls)" for (op, reason), count in items]


def reset_fallbacks(ops: Iterable[str] | None = None) -> None:
    """Forget recorded fallbacks (all, or those of ``ops``) and re-read ``FL_GEMS_BACKEND``; for tests."""
    global _overrides
    with _lock:
        for key in list(FALLBACKS):
            if ops is None or key[0] in set(ops):
                del FALLBACKS[key]
        _overrides = None


@contextmanager
def use_backend(op: str, name: str) -> Iterator[None]:
    """Serve ``op`` with backend ``name`` inside the block (tests and the bench compare backends)."""
    if name not in BACKENDS[op]:
        raise ValueError(f"{op} has no backend {name!r} (has: {', '.join(BACKENDS[op])})")
    previous = _forced.get(op)
    _forced[op] = name
    try:
        yield
    finally:
        if previous is None:
            _forced.pop(op, None)
        else:
            _forced[op] = previous
