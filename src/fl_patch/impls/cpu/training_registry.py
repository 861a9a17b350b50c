"""The CPU pack's ``megatron.training`` patches: Megatron-LM's ``pretrain_gpt.py`` trains on a machine with no GPU.

Called by ``registry.py`` (:func:`register_training`), so these registrations belong to
the CPU pack (vendor ``cpu``) and are re-made whenever the pack's registry runs. Like
``registry.py`` it only calls ``register()`` with strings: nothing is imported until a
target's module loads.

What ``megatron.training.pretrain`` needs beyond the megatron-core patches: the name
``torch`` in five megatron.training modules and two megatron-core modules only it reaches
(``training_torch_names.py``); the FlagScale training targets
(``dist_signal_handler.get_device``, ``utils.common_utils.get_device_arch_version``,
``initialize._compile_dependencies``); two places where a CPU random draw would shift
weights or dropout (the "CUDA" generator is the CPU one); the parser's GPU defaults
(``training_defaults.py``); and, outside megatron, ``torch.Tensor.cuda`` (called by the
training script itself) and ``typing.override`` (Python 3.11). The distributed
optimizer's checkpoint fixes that ``--use-distributed-optimizer --load`` needs are the
megatron-core ones already in ``registry.py`` (``optimizer.py``).
"""

from __future__ import annotations

import sys

from fl_patch import register

__all__ = ["TRAINING_MODULE_VIEWS", "register_training"]

_CPU = "cpu"
_PACK = "fl_patch.impls.cpu"

# Where a module moved between releases, each place is registered with its version gate.
_UTILS_PACKAGE = "megatron-core>=0.18"  # 0.18 split training/utils.py into the package training/utils/
_UTILS_MODULE = "megatron-core<0.18"

TRAINING_MODULE_VIEWS: tuple[tuple[str, str, str | None], ...] = (
    ("megatron.training.initialize", "INITIALIZE", None),
    ("megatron.training.arguments", "ARGUMENTS", None),
    ("megatron.training.training", "TRAINING", None),
    # 0.18 moved get_model's DDP wrapping out of training.py (already viewed) into models/dist_utils.py.
    ("megatron.training.models.dist_utils", "DIST_UTILS", "megatron-core>=0.18"),
    ("megatron.training.utils.common_utils", "COMMON_UTILS", _UTILS_PACKAGE),
    ("megatron.training.utils", "COMMON_UTILS", _UTILS_MODULE),
    ("megatron.training.checkpointing", "CHECKPOINTING", None),
    ("megatron.core.timers", "TIMERS", None),
    ("megatron.core.rerun_state_machine", "RERUN_STATE_MACHINE", None),
)
"""Modules whose name ``torch`` becomes a CPU view, the view (in ``training_torch_names``), the version gate."""


def register_training() -> None:
    """Register every ``megatron.training`` patch of the CPU pack."""
    # -- The name `torch` in modules that assume CUDA.
    for module, view, requires in TRAINING_MODULE_VIEWS:
        register(target=f"{module}.torch", impl=f"{_PACK}.training_torch_names.{view}", vendor=_CPU, requires=requires)

    # -- FlagScale's megatron.training targets.
    register(
        target="megatron.training.dist_signal_handler.get_device",
        impl=f"{_PACK}.training_functions.get_device",
        vendor=_CPU,
    )
    for utils, requires in (("utils.common_utils", _UTILS_PACKAGE), ("utils", _UTILS_MODULE)):
        register(
            target=f"megatron.training.{utils}.get_device_arch_version",
            impl=f"{_PACK}.training_functions.get_device_arch_version",
            vendor=_CPU,
            requires=requires,
        )
    register(
        target="megatron.training.initialize._compile_dependencies",
        impl=f"{_PACK}.training_functions.compile_dependencies",
        vendor=_CPU,
    )

    # -- The "CUDA" generator is the CPU generator: CPU draws upstream assumes separate.
    register(
        target="megatron.training.initialize._warmup_jit_function",
        impl=f"{_PACK}.training_functions.warmup_jit_function",
        vendor=_CPU,
    )
    register(
        target="megatron.training.datasets.data_samplers.build_pretraining_data_loader",
        impl=f"{_PACK}.training_functions.build_pretraining_data_loader",
        vendor=_CPU,
    )

    # -- Command-line defaults only a CPU needs (said once, on rank 0).
    register(
        target="megatron.training.arguments.add_megatron_arguments",
        impl=f"{_PACK}.training_defaults.add_megatron_arguments",
        vendor=_CPU,
    )

    # -- Outside megatron: what a training script itself calls, and Python 3.11.
    register(target="torch.Tensor.cuda", impl=f"{_PACK}.training_functions.tensor_cuda", vendor=_CPU)
    if sys.version_info < (3, 12):
        register(
            target="typing.override",
            impl=f"{_PACK}.training_functions.override",
            vendor=_CPU,
            create=True,
        )
