"""The CUDA-on-CPU transfer: unmodified CUDA code around megatron runs on a machine with no GPU.

Why: the CPU pack patches megatron; the code around it still assumes CUDA. A training
script or a test written for a GPU calls ``torch.cuda.set_device(local_rank)``,
``init_process_group(backend="nccl")``, ``model.cuda()``, ``batch.to("cuda")``,
``torch.zeros(..., device="cuda")``, ``torch.cuda.manual_seed(...)``, streams, events and
``torch.cuda.synchronize()``. On a CPU-only torch each of those raises ("Torch not compiled
with CUDA enabled", "Distributed package doesn't have NCCL built in") or, worse, silently
does nothing: ``torch.cuda.manual_seed`` and ``torch.cuda.set_rng_state`` queue their work
for a CUDA initialisation that never comes, ``torch.autocast("cuda")`` and
``GradScaler("cuda")`` disable themselves with a warning (fp32 math, no loss scaling).

How: torch_npu's ``transfer_to_npu`` idea, for the CPU: the functions themselves are
replaced, process-wide, through fl_patch's registry (``cuda_on_cpu/registry.py``, vendor
``cpu``, so only where no accelerator is found), each by a plain function below that maps
the CUDA device to the CPU and calls the original. ``uninstall()`` puts every original
back (aliases included). What is redirected is said once per process, on stderr (rank 0).

What is *not* claimed, on purpose (each a choice that would change results or meaning):

- ``torch.cuda.is_available()`` stays **False**: code that asks takes its CPU path, and
  tests that need a GPU skip. ``device_count()`` is 1 (the one "CUDA" device, which is the
  CPU), so ``rank % torch.cuda.device_count()`` and ``set_device(local_rank)`` work.
- Device properties and capability (``get_device_properties``, ``get_device_capability``,
  ``mem_get_info``, ``is_bf16_supported``...) are torch's own: they raise or answer for
  CUDA, never invent a GPU. Memory statistics are torch's own on a CPU build (0: no
  device memory is in use); only their ``reset_*`` functions, which raise there, become
  no-ops.
- CUDA graphs, fp8 and other CUDA-only features are not stood in: they raise as upstream.
- ``tensor.is_cuda`` and ``tensor.device`` tell the truth (``cpu``).

Upstream reference: torch 2.13 (``torch/cuda/__init__.py``, ``torch/cuda/random.py``,
``torch/cuda/streams.py``, ``torch/cuda/memory.py``, ``torch/distributed/distributed_c10d.py``,
``torch/amp``); the CUDA-assuming callers: Megatron-LM's ``examples/`` and
``tests/unit_tests`` (tag ``core_v0.19.0``).
Drop when: the code around megatron selects its device through ``torch.accelerator``.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.amp.autocast_mode
import torch.amp.grad_scaler
import torch.cuda
import torch.cuda.memory
import torch.cuda.random
import torch.distributed
import torch.distributed.distributed_c10d as c10d
import torch.nn.parallel
import torch.utils._device

from fl_patch.impls.cpu import cuda_stand_ins
from fl_patch.impls.cpu.cuda_names import FACTORY_NAMES
from fl_patch.impls.cpu.cuda_stand_ins import (
    CPU,
    STREAM_CONTEXT,
    Event,
    Stream,
    StreamContext,
    cpu_device,
    is_cuda_device,
)

__all__ = [
    "FACTORIES",
    "TENSOR_NEW",
    "Device",
    "Event",
    "Stream",
    "announce",
    "autocast_init",
    "current_device",
    "current_stream",
    "ddp_init",
    "default_stream",
    "device_context_init",
    "device_count",
    "event_new",
    "factory",
    "get_device_name",
    "grad_scaler_init",
    "init_device_mesh",
    "init_process_group",
    "ipc_collect",
    "is_current_stream_capturing",
    "new_group",
    "new_subgroups",
    "new_subgroups_by_enumeration",
    "reset_memory_stats",
    "set_device",
    "set_stream",
    "stream",
    "stream_new",
    "synchronize",
    "tensor_new",
    "tensor_pin_memory",
    "tensor_record_stream",
    "tensor_to",
]


def announce() -> None:
    """Say once per job, in one short line, that the transfer is on (``reporting/notices.py``: rank 0 only, no
    child of a process that said it, never under ``--list``/``--check`` or a plugin's test)."""
    from fl_patch.reporting.notices import say_once_per_job

    say_once_per_job(
        "cuda_on_cpu",
        "fl_patch CPU pack: no GPU here; CUDA calls run on the CPU (FL_PATCH_CUDA_ON_CPU=0 turns it off)",
    )


def _unwrapped(obj: Any) -> Any:
    """The torch original behind an impl of this module (if an import ever sees one installed)."""
    while getattr(obj, "__fl_cuda_on_cpu__", False):
        obj = obj._fl_original
    return obj


def _mark(wrapper: Callable[..., Any], original: Any, name: str) -> Callable[..., Any]:
    # Not ``__wrapped__``: inspect.signature would follow it to a builtin whose signature
    # cannot be read, and ``--check`` could not read the impl's own (*args, **kwargs).
    wrapper._fl_original = original  # type: ignore[attr-defined]
    wrapper.__fl_cuda_on_cpu__ = True  # type: ignore[attr-defined]
    wrapper.__name__ = name
    wrapper.__qualname__ = name
    return wrapper


# --------------------------------------------------------------------------- devices in arguments
FACTORIES: tuple[str, ...] = FACTORY_NAMES
"""Tensor factories of ``torch`` that take a ``device`` keyword (each ``torch.<name>`` is redirected)."""


def _on_host(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A factory's keywords with a CUDA ``device`` made the CPU and ``pin_memory=True`` made ordinary memory.

    Pinned (page-locked) host memory exists for an accelerator's copies; without one torch refuses it
    ("pin_memory=True requires a CUDA or other accelerator backend"), and here the 'device' is the host
    itself: the same tensor in ordinary memory (``is_pinned()`` says False, truthfully), as
    :func:`tensor_pin_memory` gives for ``t.pin_memory()``.
    """
    device = kwargs.get("device")
    if device is not None and is_cuda_device(device):
        kwargs["device"] = CPU
    if kwargs.get("pin_memory"):
        kwargs["pin_memory"] = False
    return kwargs


def _factory(name: str) -> Callable[..., Any]:
    original = _unwrapped(getattr(torch, name))

    def factory_on_cpu(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **_on_host(kwargs))

    factory_on_cpu.__doc__ = (
        f"Patch for ``torch.{name}``: a CUDA ``device`` (``'cuda'``, ``'cuda:1'``, "
        "``torch.device('cuda')``, an ordinal) becomes the CPU, ``pin_memory=True`` ordinary host memory; "
        "everything else is torch's own."
    )
    return _mark(factory_on_cpu, original, name)


factory: dict[str, Callable[..., Any]] = {name: _factory(name) for name in FACTORIES}
"""One impl per factory (``cuda_on_cpu.factory.zeros`` is not a path, so the registry names
module-level aliases below, which are these objects)."""

globals().update({f"factory_{name}": impl for name, impl in factory.items()})


class Generator(_unwrapped(torch.Generator)):  # type: ignore[misc]
    """Patch for ``torch.Generator`` (``torch.Generator(device="cuda")``, a data pipeline's seeded generator).

    Why: on a CPU-only torch it raises "Cannot get CUDA generator without ATen_cuda library".
    How: a CUDA ``device`` becomes the CPU; the object is a ``torch.Generator`` (a subclass), so
    ``isinstance`` checks and every ``generator=`` argument take it as before.
    Upstream reference: torch 2.13, ``torch._C.Generator``.
    Drop when: the callers take the generator's device from their tensors.
    """

    def __new__(cls, device: Any = None) -> Generator:
        if device is None:
            return super().__new__(cls)
        return super().__new__(cls, CPU if is_cuda_device(device) else device)


_TENSOR_TO = _unwrapped(torch.Tensor.to)


def tensor_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """Patch for ``torch.Tensor.to``.

    Why: CUDA code moves tensors with ``t.to("cuda")``, ``t.to(device)`` (a
    ``torch.device("cuda", local_rank)``), ``t.to(torch.cuda.current_device())`` (an
    ordinal, which ``Tensor.to`` reads as CUDA) or ``t.to(device, dtype)``; on a CPU-only
    torch each raises "Torch not compiled with CUDA enabled". ``nn.Module.to`` goes
    through here too (its ``convert`` calls ``t.to(device, ...)``).
    How: a CUDA device, positional (first) or ``device=``, becomes the CPU; dtypes, other
    tensors and other devices pass through unchanged.
    Upstream reference: torch 2.13, ``Tensor.to`` (``torch/_tensor_docs.py``).
    Drop when: the code around megatron moves tensors to ``torch.accelerator`` devices.
    """
    if args and not isinstance(args[0], (torch.dtype, torch.Tensor)) and is_cuda_device(args[0]):
        args = (CPU, *args[1:])
    device = kwargs.get("device")
    if device is not None and is_cuda_device(device):
        kwargs["device"] = CPU
    return _TENSOR_TO(self, *args, **kwargs)


def _tensor_new(name: str) -> Callable[..., Any]:
    original = _unwrapped(getattr(torch.Tensor, name))

    def new_on_cpu(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **_on_host(kwargs))

    new_on_cpu.__doc__ = (
        f"Patch for ``torch.Tensor.{name}``: a CUDA ``device=`` becomes the CPU "
        "(``t.new_zeros(n, device='cuda')``), ``pin_memory=True`` ordinary host memory; everything else is "
        "torch's own."
    )
    return _mark(new_on_cpu, original, f"tensor_{name}")


TENSOR_NEW = ("new_empty", "new_full", "new_ones", "new_tensor", "new_zeros")
tensor_new: dict[str, Callable[..., Any]] = {name: _tensor_new(name) for name in TENSOR_NEW}
globals().update({f"tensor_{name}": impl for name, impl in tensor_new.items()})

_PIN_MEMORY = _unwrapped(torch.Tensor.pin_memory)
_RECORD_STREAM = _unwrapped(torch.Tensor.record_stream)


def tensor_pin_memory(self: torch.Tensor, device: object = None) -> torch.Tensor:
    """Patch for ``torch.Tensor.pin_memory``.

    Why: CUDA code pins host buffers for asynchronous copies to the GPU
    (``t.pin_memory()``); without an accelerator torch raises "Cannot access accelerator
    device when none is available".
    How: there is no device to copy to, so page-locking has nothing to speed up: the tensor
    itself (unpinned: ``is_pinned()`` says False, truthfully). Values are untouched.
    Upstream reference: torch 2.13, ``Tensor.pin_memory``.
    Drop when: callers pin only when ``torch.accelerator.is_available()``.
    """
    return self


def tensor_record_stream(self: torch.Tensor, stream: Any) -> None:
    """Patch for ``torch.Tensor.record_stream``.

    Why: CUDA code tells the caching allocator that a tensor is used on a side stream
    (``t.record_stream(torch.cuda.current_stream())``); with the CPU's stand-in stream
    torch raises "unknown parameter type".
    How: for a stand-in stream there is no allocator to tell (CPU memory is freed when the
    last reference goes): nothing to do. Any other stream goes to torch.
    Upstream reference: torch 2.13, ``Tensor.record_stream``.
    Drop when: no CUDA stream stand-in is needed.
    """
    if isinstance(stream, Stream):
        return None
    return _RECORD_STREAM(self, stream)


_DEVICE_CONTEXT_INIT = _unwrapped(torch.utils._device.DeviceContext.__init__)


def device_context_init(self: Any, device: Any) -> None:
    """Patch for ``torch.utils._device.DeviceContext.__init__``.

    Why: ``with torch.device("cuda"):`` and ``torch.set_default_device("cuda")`` make every
    factory inside allocate on CUDA (through this context); on a CPU-only torch the first
    allocation raises.
    How: a CUDA device becomes the CPU before the context records it.
    Upstream reference: torch 2.13, ``torch/utils/_device.py``.
    Drop when: the code around megatron uses ``torch.accelerator`` devices.
    """
    _DEVICE_CONTEXT_INIT(self, cpu_device(device))


# --------------------------------------------------------------------------- torch.cuda: devices
_current_index = 0


_LAUNCHER_LOCAL_WORLD = "LOCAL_WORLD_SIZE"


def device_count() -> int:
    """Patch for ``torch.cuda.device_count``.

    Why: CUDA code picks its device with ``torch.cuda.set_device(rank % torch.cuda.device_count())``
    (Megatron-LM's ``tests/unit_tests/test_utilities.py``); with 0 that is a
    ``ZeroDivisionError``. Code that sizes by devices counts them, and under a launcher it
    expects one device per local rank: Megatron-LM's ``Utils.set_world_size()`` takes the
    world size from ``device_count()`` and 7 of its tests assert ``device_count() ==
    world_size`` (issue 27).
    How: what a node with one GPU per local rank reports: the launcher's
    ``LOCAL_WORLD_SIZE`` (torchrun, torch.distributed.launch and torchx set it), else 1 (the
    CPU is the one "CUDA" device). Every ordinal below it is the CPU; ``set_device`` refuses
    one at or above it, as torch does (``is_available()`` stays False: see the module).
    Upstream reference: torch 2.13, ``torch/cuda/__init__.py``; torch 2.13
    ``torch/distributed/elastic/agent/server/api.py`` (``LOCAL_WORLD_SIZE``).
    Drop when: the callers use ``torch.accelerator.device_count()``.
    """
    local = os.environ.get(_LAUNCHER_LOCAL_WORLD, "")
    try:
        count = int(local)
    except ValueError:
        return 1  # unset, or not a number a launcher would write: no launcher's count to follow
    return count if count > 0 else 1


def set_device(device: object) -> None:
    """Patch for ``torch.cuda.set_device``.

    Why: every CUDA training script starts with ``torch.cuda.set_device(local_rank)``; on a
    CPU-only torch it raises (``torch._C`` has no ``_cuda_setDevice``).
    How: every ordinal below :func:`device_count` names the CPU (each rank's "own GPU" is its
    CPU): the ordinal is kept for ``current_device()`` and nothing else changes. An ordinal
    at or above the count raises ``ValueError`` (torch: "invalid device ordinal"), so
    ``current_device() < device_count()`` always holds.
    Upstream reference: torch 2.13, ``torch/cuda/__init__.py``.
    Drop when: the callers use ``torch.accelerator.set_device_index``.
    """
    global _current_index
    if isinstance(device, torch.device):
        index = device.index
    elif isinstance(device, str):
        index = torch.device(device).index
    else:
        index = int(device)  # type: ignore[call-overload]
    if index is None or index < 0:
        return  # torch: a negative ordinal (or "cuda" without one) leaves the device as it is
    count = device_count()
    if index >= count:
        raise ValueError(
            f"torch.cuda.set_device({device!r}): invalid device ordinal {index}: the CUDA-on-CPU transfer "
            f"reports {count} device(s) ({_LAUNCHER_LOCAL_WORLD}={os.environ.get(_LAUNCHER_LOCAL_WORLD, 'unset')}: "
            "one per local rank under a launcher, else 1)"
        )
    _current_index = index


def current_device() -> int:
    """Patch for ``torch.cuda.current_device``.

    Why: CUDA code allocates on ``device=torch.cuda.current_device()`` and builds
    ``torch.device("cuda", torch.cuda.current_device())``; on a CPU-only torch it raises.
    How: the ordinal last given to ``set_device`` (0 by default), as torch returns; an
    ordinal given as a device is the CPU for every redirected factory and ``Tensor.to``.
    Upstream reference: torch 2.13, ``torch/cuda/__init__.py``.
    Drop when: the callers use ``torch.accelerator.current_device_index``.
    """
    return _current_index


class Device(torch.cuda.device):
    """Patch for ``torch.cuda.device`` (the context manager ``with torch.cuda.device(i):``).

    Why: on a CPU-only torch entering it raises "PyTorch was compiled without CUDA support".
    How: the device is the CPU whatever the ordinal: entering and leaving change nothing.
    Upstream reference: torch 2.13, ``torch/cuda/__init__.py`` ``class device``.
    Drop when: the callers use ``torch.accelerator.device_index``.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


def get_device_name(device: object = None) -> str:
    """Patch for ``torch.cuda.get_device_name``.

    Why: CUDA scripts log ``torch.cuda.get_device_name()``; on a CPU-only torch it raises.
    How: the name of what the device is: the CPU. (Properties and capability are not stood
    in: a number there would be a claim about a GPU.)
    Upstream reference: torch 2.13, ``torch/cuda/__init__.py``.
    Drop when: callers log ``torch.accelerator`` devices.
    """
    return "cpu (fl_patch CUDA-on-CPU)"


def synchronize(device: object = None) -> None:
    """Patch for ``torch.cuda.synchronize``.

    Why: CUDA code waits for the GPU (timing, before a host read, Megatron-LM's test
    utilities before every barrier); on a CPU-only torch it raises.
    How: CPU work is complete when the call that did it returns: nothing to wait for.
    Upstream reference: torch 2.13, ``torch/cuda/__init__.py``.
    Drop when: callers use ``torch.accelerator.synchronize``.
    """
    return None


def ipc_collect() -> None:
    """Patch for ``torch.cuda.ipc_collect``: no CUDA IPC memory exists to collect (torch raises)."""
    return None


def reset_memory_stats(device: object = None) -> None:
    """Patch for ``torch.cuda.memory.reset_peak_memory_stats`` and ``reset_accumulated_memory_stats``.

    Why: CUDA code resets the allocator's counters before measuring; on a CPU build torch's
    statistics are all 0 (``memory_allocated()`` is 0: no device memory is in use) but the
    resets raise (``torch._C`` has no ``_cuda_resetPeakMemoryStats``).
    How: counters that are 0 and stay 0 need no reset. The statistics themselves stay
    torch's own (0), never an invented number.
    Upstream reference: torch 2.13, ``torch/cuda/memory.py``.
    Drop when: callers measure through ``torch.accelerator.memory``.
    """
    return None


def is_current_stream_capturing() -> bool:
    """Patch for ``torch.cuda.is_current_stream_capturing``: no CUDA graph is ever captured here (torch raises)."""
    return False


# --------------------------------------------------------------------------- torch.cuda: streams
def current_stream(device: object = None) -> Stream:
    """Patch for ``torch.cuda.current_stream``.

    Why: CUDA code orders work across streams (``torch.cuda.current_stream().wait_stream(s)``);
    on a CPU-only torch it raises.
    How: the one stand-in stream everything runs on (``cuda_stand_ins.Stream``).
    Upstream reference: torch 2.13, ``torch/cuda/__init__.py``.
    Drop when: callers use ``torch.accelerator.current_stream``.
    """
    return cuda_stand_ins.default_stream()


def default_stream(device: object = None) -> Stream:
    """Patch for ``torch.cuda.default_stream``: the one stand-in stream (see :func:`current_stream`)."""
    return cuda_stand_ins.default_stream()


def stream_new(cls: type, device: object = None, priority: int = 0, **kwargs: Any) -> Stream:
    """Patch for ``torch.cuda.streams.Stream.__new__`` (``torch.cuda.Stream()``).

    Why: CUDA code creates side streams (``torch.cuda.Stream()``) to overlap copies with
    compute; on a CPU-only torch that raises "torch.cuda.Stream requires CUDA support" (and
    on a CUDA build without a usable GPU, "no CUDA-capable device is detected").
    How: a stand-in stream (``cuda_stand_ins.Stream``: the CPU's one ordered queue, waits are
    no-ops). It is not an instance of ``torch.cuda.Stream`` (see ``cuda_stand_ins``), so
    Python does not call that class's ``__init__`` on it.
    Upstream reference: torch 2.13, ``torch/cuda/streams.py``.
    Drop when: callers use ``torch.Stream`` on ``torch.accelerator`` devices.
    """
    return Stream(device, priority)


def event_new(
    cls: type, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, external: bool = False
) -> Event:
    """Patch for ``torch.cuda.streams.Event.__new__`` (``torch.cuda.Event()``).

    Why: CUDA code times work with ``torch.cuda.Event(enable_timing=True)`` and orders streams
    with events; on a CPU-only torch: "Tried to instantiate dummy base class Event".
    How: a stand-in event (``cuda_stand_ins.Event``): complete when recorded;
    ``elapsed_time`` is the host time between two records, which on the CPU is the time the
    work took. Not an instance of ``torch.cuda.Event`` (see :func:`stream_new`).
    Upstream reference: torch 2.13, ``torch/cuda/streams.py``.
    Drop when: callers use ``torch.Event`` on ``torch.accelerator`` devices.
    """
    return Event(enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def set_stream(stream: object) -> None:
    """Patch for ``torch.cuda.set_stream``: every stream is the CPU's one queue, nothing to switch."""
    return None


def stream(stream: object) -> StreamContext:
    """Patch for ``torch.cuda.stream``.

    Why: ``with torch.cuda.stream(side_stream):`` runs work on another stream; torch's
    context manager calls into CUDA for a stream that is not its own.
    How: the CPU has one ordered queue: a context that changes nothing, an object that can be entered
    again as torch's ``StreamContext`` can.
    Upstream reference: torch 2.13, ``torch/cuda/__init__.py``.
    Drop when: callers use ``torch.accelerator`` streams.
    """
    return STREAM_CONTEXT


# --------------------------------------------------------------------------- distributed
_BACKEND_OPTION = "backend"


def _gloo(backend: Any) -> Any:
    """``backend`` with NCCL replaced by gloo (``"nccl"``, ``Backend.NCCL``, ``"cuda:nccl,cpu:gloo"``)."""
    if isinstance(backend, str) and "nccl" in backend.lower():
        return "gloo"
    return backend


def _rebackend(
    original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], drop: tuple[str, ...]
) -> Any:
    bound = inspect.signature(original).bind_partial(*args, **kwargs)
    arguments = bound.arguments
    if _BACKEND_OPTION in arguments:
        was = arguments[_BACKEND_OPTION]
        arguments[_BACKEND_OPTION] = _gloo(was)
        if arguments[_BACKEND_OPTION] != was:
            for name in drop:  # NCCL's own options mean nothing to gloo
                if name in arguments and arguments[name] is not None:
                    arguments[name] = None
    if "device_id" in arguments and is_cuda_device(arguments["device_id"]):
        arguments["device_id"] = None  # gloo binds no device
    return original(*bound.args, **bound.kwargs)


_INIT_PROCESS_GROUP = _unwrapped(c10d.init_process_group)
_NEW_GROUP = _unwrapped(c10d.new_group)
_NEW_SUBGROUPS = _unwrapped(c10d.new_subgroups)
_NEW_SUBGROUPS_BY_ENUMERATION = _unwrapped(c10d.new_subgroups_by_enumeration)


def init_process_group(*args: Any, **kwargs: Any) -> None:
    """Patch for ``torch.distributed.init_process_group``.

    Why: CUDA scripts initialise with ``backend="nccl"`` (Megatron-LM's
    ``run_simple_mcore_train_loop.py``, its unit tests' ``Utils.initialize_distributed``);
    a CPU-only torch has no NCCL: "Distributed package doesn't have NCCL built in".
    How: NCCL becomes gloo, which reduces CPU tensors (``"cuda:nccl,cpu:gloo"`` becomes
    ``"gloo"``; NCCL ``pg_options`` and a CUDA ``device_id`` are dropped). Every other
    argument is passed as given.
    Upstream reference: torch 2.13, ``torch/distributed/distributed_c10d.py``.
    Drop when: callers pick the backend from ``torch.distributed.get_default_backend_for_device``.
    """
    _rebackend(_INIT_PROCESS_GROUP, args, kwargs, ("pg_options",))


def new_group(*args: Any, **kwargs: Any) -> Any:
    """Patch for ``torch.distributed.new_group``: ``backend="nccl"`` becomes gloo (see :func:`init_process_group`)."""
    return _rebackend(_NEW_GROUP, args, kwargs, ("pg_options",))


def new_subgroups(*args: Any, **kwargs: Any) -> Any:
    """Patch for ``torch.distributed.new_subgroups``: ``backend="nccl"`` becomes gloo (see :func:`init_process_group`)."""
    return _rebackend(_NEW_SUBGROUPS, args, kwargs, ("pg_options",))


def new_subgroups_by_enumeration(*args: Any, **kwargs: Any) -> Any:
    """Patch for ``torch.distributed.new_subgroups_by_enumeration``: ``backend="nccl"`` becomes gloo."""
    return _rebackend(_NEW_SUBGROUPS_BY_ENUMERATION, args, kwargs, ("pg_options",))


_INIT_DEVICE_MESH = "torch.distributed.device_mesh.init_device_mesh"


def _init_device_mesh_original() -> Callable[..., Any]:
    # The engine's record of torch's function: the module attribute, read at call time, is this impl once
    # installed (reading it made every call recurse until RecursionError). device_mesh is loaded: this impl is
    # called only from there.
    import fl_patch

    return fl_patch.original(_INIT_DEVICE_MESH)


def init_device_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
    """Patch for ``torch.distributed.device_mesh.init_device_mesh``.

    Why: ``init_device_mesh("cuda", (dp, tp))`` builds NCCL groups on CUDA devices.
    How: ``"cuda"`` becomes ``"cpu"`` (gloo groups over the same ranks).
    Upstream reference: torch 2.13, ``torch/distributed/device_mesh.py``.
    Drop when: callers pass ``torch.accelerator`` device types.
    """
    if device_type == "cuda":
        device_type = "cpu"
    return _init_device_mesh_original()(device_type, *args, **kwargs)


_DDP_INIT = _unwrapped(torch.nn.parallel.DistributedDataParallel.__init__)


def ddp_init(
    self: Any, module: torch.nn.Module, device_ids: Any = None, output_device: Any = None, *args: Any, **kwargs: Any
) -> None:
    """Patch for ``torch.nn.parallel.DistributedDataParallel.__init__``.

    Why: CUDA scripts wrap with ``DistributedDataParallel(model, device_ids=[local_rank])``;
    with the model on the CPU torch refuses device ids ("only work with single-device/
    multiple-device GPU modules or CPU modules").
    How: when every parameter is on the CPU, ``device_ids`` and ``output_device`` (CUDA
    ordinals) are dropped: torch's CPU DDP, the same gradient all-reduce.
    Upstream reference: torch 2.13, ``torch/nn/parallel/distributed.py``.
    Drop when: callers pass ``device_ids`` only on a GPU.
    """
    on_cpu = all(p.device.type == "cpu" for p in module.parameters())
    if on_cpu and device_ids is not None and all(is_cuda_device(d) for d in device_ids):
        device_ids = None
        output_device = None if output_device is None or is_cuda_device(output_device) else output_device
    _DDP_INIT(self, module, device_ids, output_device, *args, **kwargs)


# --------------------------------------------------------------------------- mixed precision
_AUTOCAST_INIT = _unwrapped(torch.amp.autocast_mode.autocast.__init__)
_GRAD_SCALER_INIT = _unwrapped(torch.amp.grad_scaler.GradScaler.__init__)


def autocast_init(
    self: Any,
    device_type: str,
    dtype: torch.dtype | None = None,
    enabled: bool = True,
    cache_enabled: bool | None = None,
) -> None:
    """Patch for ``torch.amp.autocast_mode.autocast.__init__`` (``torch.autocast``, ``torch.cuda.amp.autocast``).

    Why: ``torch.autocast("cuda", dtype=torch.bfloat16)`` on a CPU-only torch disables itself
    with a warning: the region runs in fp32, not the precision the script asked for.
    How: ``"cuda"`` becomes ``"cpu"``, with CUDA's default dtype (float16) when none is given
    (the CPU's own default would be bfloat16): the lower-precision matmuls the script asked
    for, under CPU autocast's op list.
    Upstream reference: torch 2.13, ``torch/amp/autocast_mode.py``.
    Drop when: callers pass ``torch.accelerator`` device types.
    """
    if device_type == "cuda":
        device_type = "cpu"
        if dtype is None:
            dtype = torch.float16
    _AUTOCAST_INIT(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


def grad_scaler_init(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
    """Patch for ``torch.amp.grad_scaler.GradScaler.__init__`` (``torch.amp.GradScaler``, ``torch.cuda.amp.GradScaler``).

    Why: ``GradScaler("cuda")`` on a CPU-only torch disables itself with a warning: fp16
    training runs without loss scaling (gradients underflow), silently.
    How: ``"cuda"`` becomes ``"cpu"``: torch's CPU grad scaler, the same scaling, inf checks
    and step skipping.
    Upstream reference: torch 2.13, ``torch/amp/grad_scaler.py``.
    Drop when: callers pass ``torch.accelerator`` device types.
    """
    _GRAD_SCALER_INIT(self, "cpu" if device == "cuda" else device, *args, **kwargs)


announce()
