"""CUDA's runtime objects as the CPU pack stands them in: one implementation for both of its mechanisms.

The CPU pack maps CUDA to the CPU in two places: the per-module views of torch
(``torch_view.py``, the name ``torch`` inside megatron modules that assume CUDA) and the
process-wide CUDA-on-CPU transfer (``cuda_on_cpu.py``, ``torch.cuda.*`` and friends
themselves, for code outside megatron). Both hand out the objects defined here, so a
stream, an event or the "CUDA" RNG behaves the same whichever way it was reached.

What each stands for, on a machine whose only device is the CPU:

- a CUDA device is the CPU: :func:`cpu_device` maps ``"cuda"``, ``"cuda:1"``,
  ``torch.device("cuda", 0)`` and a bare ordinal (``0``, what ``current_device()`` returns
  and what ``tensor.to(0)`` means) to ``cpu``, and leaves every other device alone;
- the "CUDA" random-number generator *is* the CPU default generator: dropout and every
  other op draw from it here, so seeding, reading or restoring "the CUDA RNG" must act on
  it (upstream's calls on a CPU-only torch are queued for a CUDA initialisation that never
  comes: ``torch.cuda.manual_seed`` and ``set_rng_state`` silently do nothing);
- streams and events: CPU work runs in order and is complete when the call returns, so a
  stream is one ordered queue whose waits are no-ops and an event is complete once
  recorded (its ``elapsed_time`` is the host time between two records, which on the CPU is
  the time the work took);
- NVTX ranges are profiler annotations: no-ops.

:class:`Stream` and :class:`Event` are plain classes with ``torch.cuda.Stream``'s and
``torch.cuda.Event``'s methods; they never reach CUDA. (They do not subclass torch's: on a
CUDA build of torch running where no GPU is usable, those have a C base that cannot make an
instance without a device: "no CUDA-capable device is detected", measured. So
``isinstance(s, torch.cuda.Stream)`` is False for a stand-in.)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, Literal

import torch

__all__ = [
    "CPU",
    "STREAM_CONTEXT",
    "Event",
    "Stream",
    "StreamContext",
    "cpu_device",
    "default_stream",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "is_cuda_device",
    "manual_seed",
    "manual_seed_all",
    "nvtx_mark",
    "nvtx_range",
    "nvtx_range_pop",
    "nvtx_range_push",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]

CPU = torch.device("cpu")


def is_cuda_device(device: object) -> bool:
    """Whether ``device`` names a CUDA device (a string, a ``torch.device`` or a bare ordinal)."""
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    return isinstance(device, int) and not isinstance(device, bool)


def cpu_device(device: object) -> object:
    """``device`` with any CUDA device replaced by ``cpu`` (other values unchanged)."""
    return CPU if is_cuda_device(device) else device


# --------------------------------------------------------------------------- the "CUDA" RNG
def get_rng_state(device: object = "cuda") -> torch.Tensor:
    """The "CUDA" RNG state: the CPU default generator's (a copy, as upstream returns)."""
    return torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device: object = "cuda") -> None:
    """Set the CPU default generator's state, now (upstream queues it for a CUDA init that never comes)."""
    torch.set_rng_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """One state per "CUDA" device: there is one, the CPU generator."""
    return [torch.get_rng_state()]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    """Set the CPU generator from the (one) device state given."""
    for state in new_states:
        torch.set_rng_state(state)


def manual_seed(seed: int) -> None:
    """Seed the CPU default generator (upstream queues the seed for a CUDA init that never comes)."""
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every "CUDA" generator: the CPU default generator."""
    torch.default_generator.manual_seed(int(seed))


def seed() -> None:
    """Seed the CPU default generator from a non-deterministic source."""
    torch.default_generator.seed()


def seed_all() -> None:
    """Seed every "CUDA" generator (the CPU one) from a non-deterministic source."""
    torch.default_generator.seed()


def initial_seed() -> int:
    """The CPU default generator's initial seed."""
    return int(torch.default_generator.initial_seed())


# --------------------------------------------------------------------------- streams and events
class Event:
    """``torch.cuda.Event`` on the CPU: complete as soon as it is recorded."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, **kwargs: Any
    ) -> None:
        self._enable_timing = enable_timing
        self._recorded_at: float | None = None

    def record(self, stream: object = None) -> None:
        self._recorded_at = time.perf_counter()

    def wait(self, stream: object = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between two recorded events (as ``torch.cuda.Event.elapsed_time``)."""
        if self._recorded_at is None or end_event._recorded_at is None:
            raise RuntimeError("both events must be recorded before elapsed_time()")
        return (end_event._recorded_at - self._recorded_at) * 1000.0

    def ipc_handle(self) -> bytes:
        raise RuntimeError("an event of the CPU stand-in for CUDA cannot be shared between processes")

    @property
    def cuda_event(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return "<torch.cuda.Event on the CPU (fl_patch CPU pack)>"


class Stream:
    """``torch.cuda.Stream`` on the CPU: one ordered queue, so every wait is a no-op."""

    def __init__(self, device: object = None, priority: int = 0, **kwargs: Any) -> None:
        self._priority = priority

    @property
    def device(self) -> torch.device:
        return CPU

    @property
    def priority(self) -> int:
        return self._priority

    @property
    def cuda_stream(self) -> int:
        return 0

    @property
    def stream_id(self) -> int:
        return 0

    def wait_stream(self, stream: object) -> None:
        return None

    def wait_event(self, event: object) -> None:
        return None

    def record_event(self, event: Event | None = None) -> Event:
        event = event if event is not None else Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return "<torch.cuda.Stream on the CPU (fl_patch CPU pack)>"


_DEFAULT_STREAM = Stream()


def default_stream(device: object = None) -> Stream:
    """The stream everything runs on: there is one."""
    return _DEFAULT_STREAM


class StreamContext:
    """What ``torch.cuda.stream(s)`` gives here: a context that changes nothing (the CPU has one ordered queue).

    A class, like torch's ``torch.cuda.StreamContext``, so one object can be entered again: megatron's
    ``start_grad_sync`` makes one ``torch.cuda.stream(...)`` and enters it twice (a ``@contextmanager`` object
    fails the second time: "'_GeneratorContextManager' object has no attribute 'args'").
    """

    __slots__ = ()

    def __init__(self, stream: object = None) -> None:  # (torch's signature; the stream changes nothing here)
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


STREAM_CONTEXT = StreamContext()
"""The one context every ``torch.cuda.stream(...)`` stand-in returns: it holds nothing, so it can be shared."""


# --------------------------------------------------------------------------- NVTX
def nvtx_range_push(msg: str) -> int:
    """An NVTX range start: a profiler annotation, nothing to do without a GPU profiler."""
    return 0


def nvtx_range_pop() -> int:
    """An NVTX range end (see :func:`nvtx_range_push`)."""
    return 0


def nvtx_mark(msg: str) -> None:
    """An NVTX mark (see :func:`nvtx_range_push`)."""
    return None


@contextlib.contextmanager
def nvtx_range(msg: str, *args: object, **kwargs: object) -> Iterator[None]:
    """An NVTX range as a context manager (see :func:`nvtx_range_push`)."""
    yield
