"""Function patches for ``megatron.training`` on a CPU, and for what a training script hits outside megatron.

Each impl's docstring gives Why (the upstream line), How, the upstream reference
(megatron-core 0.19.2, which ships ``megatron/training``) and when it can be dropped.
Three of the targets are the ones FlagScale's own training overrides register
(``dist_signal_handler.get_device``, ``utils.common_utils.get_device_arch_version``,
``initialize._compile_dependencies``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import typing_extensions

import fl_patch
from fl_patch.impls._compat import warn_if_unverified

__all__ = [
    "build_pretraining_data_loader",
    "compile_dependencies",
    "get_device",
    "get_device_arch_version",
    "override",
    "tensor_cuda",
    "warmup_jit_function",
]

warn_if_unverified()

F = TypeVar("F", bound=Callable[..., Any])

_WARMUP = "megatron.training.initialize._warmup_jit_function"
_COMPILE = "megatron.training.initialize._compile_dependencies"
_DATA_LOADER = "megatron.training.datasets.data_samplers.build_pretraining_data_loader"
_HELPERS = "megatron.core.datasets.helpers_cpp"

_CPU = torch.device("cpu")


# --------------------------------------------------------------------------- FlagScale's training targets
def get_device(local_rank: int | None = None) -> torch.device:
    """Patch for ``megatron.training.dist_signal_handler.get_device`` (a FlagScale target).

    Why: upstream (``dist_signal_handler.py`` lines 14-25) picks the device of the exit
    signal handler's all-gather from the process group's backend: ``cuda`` for ``nccl``,
    ``cpu`` for ``gloo``, and ``raise RuntimeError`` (no message) for anything else, such as
    the ``fake`` backend that ``--fake-process-group`` initialises (``initialize.py`` line
    349): ``--exit-signal-handler --fake-process-group`` dies at the first signal check.
    How: on a machine without a GPU every collective runs on CPU tensors, whatever the
    backend: the CPU device. (With ``gloo``, the pack's default, upstream's answer is the
    same.)
    Upstream reference: megatron-core 0.19.2, ``megatron/training/dist_signal_handler.py``.
    Drop when: upstream derives the device from the backend's supported devices.
    """
    return _CPU


def get_device_arch_version() -> int:
    """Patch for ``megatron.training.utils.common_utils.get_device_arch_version`` (a FlagScale target).

    Why: upstream (``common_utils.py`` line 504) returns
    ``torch.cuda.get_device_properties(torch.device("cuda:0")).major``; ``validate_args``
    calls it whenever tensor or context parallelism is on (``arguments.py`` line 1414), so
    ``--tensor-model-parallel-size 2`` fails with "Torch not compiled with CUDA enabled"
    before training starts. ``arguments.py`` and ``utils/__init__.py`` import the name;
    fl_patch rebinds it there.
    How: 0, "no CUDA architecture": upstream then takes its pre-Blackwell branch, which
    requires ``CUDA_DEVICE_MAX_CONNECTIONS=1`` for tensor parallelism (meaningless on a
    CPU; the pack sets it when unset, see ``training_defaults``) and adds no high-priority
    stream groups.
    Upstream reference: megatron-core 0.19.2, ``megatron/training/utils/common_utils.py``.
    Drop when: upstream asks an accelerator abstraction for the device generation.
    """
    return 0


def compile_dependencies() -> None:
    """Patch for ``megatron.training.initialize._compile_dependencies`` (a FlagScale target).

    Why: upstream (``initialize.py`` lines 165-185) has rank 0 call
    ``megatron.core.datasets.utils.compile_helpers()``, which runs ``make -C
    megatron/core/datasets`` and ``sys.exit(1)`` when it fails. The megatron-core wheel ships
    the built ``helpers_cpp`` extension but no ``Makefile``: ``make`` fails and
    ``pretrain`` exits with status 1 right after initialising. (A wheel problem rather than a
    CPU one: a GPU machine with the wheel hits it too.)
    How: when ``megatron.core.datasets.helpers_cpp`` is importable there is nothing to
    compile: only upstream's closing ``torch.distributed.barrier()`` runs. Otherwise (a
    source checkout without the built extension) upstream runs unchanged.
    Upstream reference: megatron-core 0.19.2, ``megatron/training/initialize.py``,
    ``megatron/core/datasets/utils.py``.
    Drop when: upstream skips the build when the extension is already there.
    """
    if importlib.util.find_spec(_HELPERS) is None:
        fl_patch.original(_COMPILE)()
        return
    torch.distributed.barrier()


# --------------------------------------------------------------------------- the CPU generator is the "CUDA" one
def warmup_jit_function(*args: Any, **kwargs: Any) -> None:
    """Patch for ``megatron.training.initialize._warmup_jit_function``.

    Why: upstream (``initialize.py`` lines 497-558) runs the fused bias-GeLU/SwiGLU and
    bias-dropout-add functions on ``torch.rand(..., device="cuda")`` inputs (with dropout
    0.1) right after seeding and before the model is built. On a GPU those draws come from
    the CUDA generator; with ``--use-cpu-initialization`` the weights are then drawn from
    the untouched CPU generator. On a CPU the "CUDA" generator *is* the CPU generator: the
    warm-up's draws shift it, so every initial weight differs from what the same seed gives
    a GPU run (and from what a run that skips the warm-up gives).
    How: upstream's warm-up runs inside ``torch.random.fork_rng()``: the CPU generator leaves
    it in the state it entered with. The compiled functions are warmed up as upstream does.
    The original gets exactly what the caller passed: 0.19 takes ``tp_size``, 0.17/0.18 take
    no argument (passing ``tp_size=None`` there was a TypeError; ``--check`` now finds such calls).
    Upstream reference: megatron-core 0.17.1 to 0.19.2 and main, ``megatron/training/initialize.py``.
    Drop when: upstream draws its warm-up inputs from a private generator.
    """
    with torch.random.fork_rng(devices=[]):
        fl_patch.original(_WARMUP)(*args, **kwargs)


def build_pretraining_data_loader(dataset: Any, consumed_samples: int) -> Any:
    """Patch for ``megatron.training.datasets.data_samplers.build_pretraining_data_loader``.

    Why: upstream (``data_samplers.py`` lines 19-113) returns a ``torch.utils.data.DataLoader``
    with no ``generator``; each time an iterator is made from it (``iter(dataloader)`` in
    ``training.build_train_valid_test_data_iterators``, and every epoch of ``cyclic_iter``),
    torch draws its base seed from the CPU default generator
    (``_BaseDataLoaderIter.__init__``). On a GPU that is harmless: dropout draws from the
    CUDA generator. On a CPU it is the generator dropout draws from, so (measured with
    ``tests/impls/test_cpu_training.py``): ``load_checkpoint`` restores it *before* the iterators
    are made, and a resumed run's dropout masks come out of a generator advanced by one
    more draw than in the uninterrupted run (``--load`` does not reproduce the losses);
    and with tensor parallelism only TP rank 0 builds data loaders, so the TP ranks'
    generators drift apart and draw different hidden-dropout masks (TP=2 no longer
    computes TP=1's losses).
    How: the data loader gets its own ``torch.Generator`` (seeded with ``--seed``), from which
    its iterators draw their base seed; the default generator is left to dropout, as the
    CUDA generator is on a GPU. Sampling itself is untouched (megatron's samplers are
    deterministic or seed their own generators).
    Upstream reference: megatron-core 0.19.2, ``megatron/training/datasets/data_samplers.py``.
    Drop when: upstream passes a generator to its DataLoader.
    """
    loader = fl_patch.original(_DATA_LOADER)(dataset, consumed_samples)
    if isinstance(loader, torch.utils.data.DataLoader) and loader.generator is None:
        from megatron.training import get_args

        loader.generator = torch.Generator().manual_seed(int(get_args().seed))
    return loader


# --------------------------------------------------------------------------- outside megatron
def tensor_cuda(
    self: torch.Tensor,
    device: object = None,
    non_blocking: bool = False,
    memory_format: torch.memory_format = torch.preserve_format,
) -> torch.Tensor:
    """Patch for ``torch.Tensor.cuda`` (reached by training scripts themselves).

    Why: Megatron-LM's ``pretrain_gpt.py`` moves each batch with
    ``batch[key].cuda(non_blocking=True)`` (its ``get_batch``), as does
    ``megatron/training/training.py`` line 2311, and ``get_model`` moves the model with
    ``model_module.cuda(torch.cuda.current_device())`` (line 1818; ``nn.Module.cuda`` calls
    ``Tensor.cuda``). A method call on a tensor is out of reach of any view of a module's
    name ``torch``, and a script is not a megatron module: only the method itself can be
    patched. On a CPU-only torch it raises "Torch not compiled with CUDA enabled".
    How: "the CUDA device" is the CPU here: the tensor on the CPU (the same object when it
    is already there, as upstream returns ``self`` for a tensor already on the device).
    Only installed by the CPU pack, i.e. on a machine where ``Tensor.cuda`` can only fail.
    Upstream reference: Megatron-LM ``pretrain_gpt.py`` (tag ``core_v0.19.0``);
    megatron-core 0.19.2 ``megatron/training/training.py``.
    Drop when: Megatron-LM moves batches with ``.to(device)`` from an accelerator abstraction.
    """
    return self.to(device=_CPU, non_blocking=non_blocking, memory_format=memory_format)


def override(method: F) -> F:
    """Backport of ``typing.override`` (Python 3.12) for Python 3.11 (created where missing).

    Why: ``megatron/training/models/gpt.py`` and ``hybrid.py`` do ``from typing import ...,
    override``; ``typing.override`` exists from Python 3.12 on. megatron-core 0.19 declares
    ``Requires-Python >=3.12`` but runs on 3.11 otherwise; without it ``import
    megatron.training`` fails (``megatron/training/models/__init__.py`` imports both).
    How: ``typing_extensions.override`` (marks the method with ``__override__ = True``, as
    3.12's does). Registered only on Python < 3.12, with ``create=True``.
    Upstream reference: megatron-core 0.19.2, ``megatron/training/models/gpt.py`` line 14,
    ``megatron/training/models/hybrid.py`` line 5.
    Drop when: Python 3.11 is no longer used (or upstream imports it from typing_extensions).
    """
    return typing_extensions.override(method)
