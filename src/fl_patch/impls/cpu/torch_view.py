"""A CPU view of ``torch``, installed as the name ``torch`` inside megatron modules that assume CUDA.

Why: many megatron-core modules reach the GPU through their module-level name
``torch``: ``torch.zeros(..., device="cuda")``, ``device=torch.cuda.current_device()``,
``torch.cuda.synchronize()``, ``torch.cuda.current_stream()``,
``torch.cuda.manual_seed(...)``, ``torch.cuda.get_rng_state()``. On a CPU-only torch
each of those raises ("Torch not compiled with CUDA enabled"). The registry lists,
patch by patch, which upstream lines of which module need this.

How: one object per flavour, a ``types.ModuleType`` subclass (so it still looks like a
module to ``inspect``, ``typing.get_type_hints`` and to fl_patch's alias sweep, which
never sweeps a module bound to a name), replaces the name ``torch`` in one megatron
module at a time (an attribute patch, ``megatron.core.<module>.torch``). It forwards
every attribute to the real ``torch`` except, explicitly:

- ``cuda``: a :class:`CudaOnCpu` namespace (below): device queries, a no-op
  ``synchronize``/``empty_cache``/``set_device``, stand-in streams and events, and the
  "CUDA" random-number generator, which *is* the CPU default generator (dropout and
  every other CPU op draw from it, so seeding or restoring "the CUDA RNG" must act on it
  for megatron's RNG tracker to mean anything).
- tensor factories (``zeros``, ``tensor``, ``empty``, ...): a ``device`` naming CUDA
  (``"cuda"``, ``"cuda:1"``, ``torch.device("cuda")``, an int ordinal) becomes ``cpu``.
- ``autocast``: ``device_type="cuda"`` becomes ``"cpu"``.

A view never changes global ``torch``: other modules, the user's script and torch itself
keep the real one. Anything not listed goes to the real ``torch`` / ``torch.cuda``
unchanged, so an uncovered CUDA call still fails loudly, exactly as upstream would. (The
process-wide CUDA-on-CPU transfer, ``cuda_on_cpu.py``, is what changes global ``torch``,
for the code around megatron; the views stay in place with it on, so a megatron module
behaves the same with the transfer on or off. Streams, events and the "CUDA" RNG are the
same objects in both: ``cuda_stand_ins.py``.)

Two flavours exist. :data:`CPU_TORCH` tells the truth about the machine (no CUDA
device: ``torch.cuda.is_available()`` is False), which is what megatron-core's own
modules need. :data:`CPU_TORCH_ONE_DEVICE` reports one CUDA device, mapped to the CPU,
for code that refuses to run without a GPU before it ever allocates (``megatron.training``'s
``initialize``: ``assert torch.cuda.is_available()``); every "CUDA" operation it offers
still lands on the CPU.

Upstream: megatron-core 0.19.2, the modules registered in ``registry.py``.
Drop when: megatron-core selects its device through an accelerator abstraction instead
of hard-coding ``"cuda"`` (each registration says which lines).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch

from fl_patch.impls._compat import warn_if_unverified

from . import cuda_stand_ins
from .cuda_names import FACTORY_NAMES, RNG_NAMES
from .cuda_stand_ins import CPU, STREAM_CONTEXT, Event, Stream, StreamContext, cpu_device, default_stream

__all__ = ["CPU_TORCH", "CPU_TORCH_ONE_DEVICE", "CpuTorchView", "CudaOnCpu", "Event", "Stream", "cpu_device"]

warn_if_unverified()

_CPU = CPU

# torch functions that take a ``device`` keyword (megatron calls them with "cuda").
_FACTORIES = FACTORY_NAMES


def _on_cpu(factory: Callable[..., Any]) -> Callable[..., Any]:
    def factory_on_cpu(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = cpu_device(kwargs["device"])
        return factory(*args, **kwargs)

    factory_on_cpu.__name__ = factory.__name__
    factory_on_cpu.__qualname__ = f"CpuTorchView.{factory.__name__}"
    factory_on_cpu.__doc__ = f"torch.{factory.__name__}, with a CUDA ``device`` mapped to the CPU."
    return factory_on_cpu


class _Nvtx(types.ModuleType):
    """``torch.cuda.nvtx``: profiler ranges, which have no meaning without a GPU."""

    def __init__(self) -> None:
        super().__init__("torch.cuda.nvtx", "NVTX ranges as no-ops (CPU view of torch)")
        self.range_push = cuda_stand_ins.nvtx_range_push
        self.range_pop = cuda_stand_ins.nvtx_range_pop
        self.mark = cuda_stand_ins.nvtx_mark
        self.range = cuda_stand_ins.nvtx_range


_RNG_FUNCTIONS = RNG_NAMES


class _CudaRandom(types.ModuleType):
    """``torch.cuda.random``: the "CUDA" generator is the CPU default generator."""

    def __init__(self) -> None:
        super().__init__("torch.cuda.random", "the CUDA RNG API, acting on the CPU default generator")
        for name in _RNG_FUNCTIONS:
            setattr(self, name, getattr(cuda_stand_ins, name))


class CudaOnCpu(types.ModuleType):
    """``torch.cuda`` as the patched megatron modules see it; anything unlisted is the real one."""

    def __init__(self, *, reports_device: bool, capability: tuple[int, int] | None = None) -> None:
        super().__init__("torch.cuda", "torch.cuda mapped to the CPU (fl_patch CPU pack)")
        self._reports_device = reports_device
        self._capability = capability
        self.random = _CudaRandom()
        self.nvtx = _Nvtx()
        self.Stream = Stream
        self.Event = Event
        for name in _RNG_FUNCTIONS:
            setattr(self, name, getattr(cuda_stand_ins, name))
        self.default_generators = (torch.default_generator,)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)

    def __repr__(self) -> str:
        devices = "one CUDA device mapped to the CPU" if self._reports_device else "no CUDA device"
        return f"<torch.cuda on the CPU ({devices}), fl_patch CPU pack>"

    # -- devices
    def is_available(self) -> bool:
        return self._reports_device

    def is_initialized(self) -> bool:
        return self._reports_device

    def device_count(self) -> int:
        return 1 if self._reports_device else 0

    def get_device_capability(self, device: object = None) -> tuple[int, int]:
        """The capability this view was given (only views that answer a feature gate get one:
        ``training_torch_names.ARGUMENTS``), else torch's own answer (it raises without CUDA)."""
        if self._capability is None:
            return torch.cuda.get_device_capability(device)  # type: ignore[arg-type]
        return self._capability

    def current_device(self) -> torch.device:
        """The CPU device (not an ordinal: ``tensor.to(0)`` would mean CUDA again)."""
        return _CPU

    def set_device(self, device: object) -> None:
        return None

    def synchronize(self, device: object = None) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def is_current_stream_capturing(self) -> bool:
        return False

    # -- streams
    def current_stream(self, device: object = None) -> Stream:
        return default_stream()

    def default_stream(self, device: object = None) -> Stream:
        return default_stream()

    def stream(self, stream: object) -> StreamContext:
        return STREAM_CONTEXT  # (entered more than once by megatron: a class, as torch's)

    # -- memory statistics: there is no device memory to account for
    def memory_allocated(self, device: object = None) -> int:
        return 0

    def max_memory_allocated(self, device: object = None) -> int:
        return 0

    def memory_reserved(self, device: object = None) -> int:
        return 0

    def max_memory_reserved(self, device: object = None) -> int:
        return 0

    def reset_peak_memory_stats(self, device: object = None) -> None:
        return None


class CpuTorchView(types.ModuleType):
    """``torch`` for one megatron module: the real torch, but CUDA lands on the CPU."""

    def __init__(
        self,
        *,
        reports_cuda_device: bool = False,
        capability: tuple[int, int] | None = None,
        optim: types.ModuleType | None = None,
    ) -> None:
        super().__init__("torch", torch.__doc__)
        self.cuda = CudaOnCpu(reports_device=reports_cuda_device, capability=capability)
        if optim is not None:  # torch.optim as this module must see it (torch_optimizers.OPTIM)
            self.optim = optim
        for name in _FACTORIES:
            setattr(self, name, _on_cpu(getattr(torch, name)))

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(torch)) | set(vars(self)))

    def __repr__(self) -> str:
        return f"<CPU view of torch {torch.__version__}: {self.cuda!r}>"

    def autocast(self, device_type: str, *args: Any, **kwargs: Any) -> torch.autocast:
        """``torch.autocast``, with ``device_type="cuda"`` mapped to ``"cpu"``."""
        return torch.autocast("cpu" if device_type == "cuda" else device_type, *args, **kwargs)


CPU_TORCH = CpuTorchView()
"""For megatron-core modules: no CUDA device is reported, CUDA calls land on the CPU."""

CPU_TORCH_ONE_DEVICE = CpuTorchView(reports_cuda_device=True)
"""For code that requires a GPU to exist (megatron.training): one CUDA device, which is the CPU."""
