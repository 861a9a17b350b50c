"""What a pack's registrations depend on, besides the vendor: facts about this machine, each named once.

A pack registers some patches only where they are needed (the TE-compatible layers only where
Transformer Engine is absent, ``typing.override`` only before Python 3.12, ...). Each such fact is
a :class:`Condition` here, and a registry tests it where its group of ``register()`` calls starts::

    if TE_ABSENT:
        te.register_pack(vendor=CPU)

so the condition is visible at the group, and the generated index (``fl_patch.impls.index``,
``docs/patches.md``) names it for every registration under it. Testing a condition imports nothing
heavy (``importlib.util.find_spec`` finds a package without importing it; no torch, no megatron).

The index must list every registration whatever this machine has, so it asks each pack again with
conditions assumed (:func:`assuming`); a pack run by the engine never assumes anything.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

__all__ = [
    "ALL",
    "APEX_AND_TE_ABSENT",
    "CUDA_ON_CPU_ON",
    "PYTHON_BEFORE_3_12",
    "TE_ABSENT",
    "WGRAD_EXTENSION_ABSENT",
    "Condition",
    "assuming",
]

_ASSUMED: dict[str, bool] = {}  # name -> value, only inside assuming() (the index's)


class Condition:
    """A fact a group of registrations depends on: true or false on this machine, named for the index."""

    def __init__(self, name: str, meaning: str, test: Callable[[], bool]) -> None:
        self.name = name
        self.meaning = meaning  # what it says, for the index ("transformer_engine cannot be found")
        self._test = test

    def __bool__(self) -> bool:
        assumed = _ASSUMED.get(self.name)
        return self._test() if assumed is None else assumed

    def __repr__(self) -> str:
        return f"Condition({self.name})"


def _absent(*packages: str) -> Callable[[], bool]:
    return lambda: all(importlib.util.find_spec(name) is None for name in packages)


def _cuda_on_cpu_on() -> bool:
    from fl_patch.config.settings import Settings  # reads FL_PATCH_CUDA_ON_CPU, as every setting is read

    return Settings.from_environ().cuda_on_cpu


TE_ABSENT = Condition(
    "TE_ABSENT",
    "transformer_engine cannot be found (with TE installed megatron uses TE itself)",
    _absent("transformer_engine"),
)
APEX_AND_TE_ABSENT = Condition(
    "APEX_AND_TE_ABSENT",
    "neither transformer_engine nor apex can be found (megatron-core then builds torch's optimizers)",
    _absent("transformer_engine", "apex"),
)
WGRAD_EXTENSION_ABSENT = Condition(
    "WGRAD_EXTENSION_ABSENT",
    "Apex's CUDA extension fused_weight_gradient_mlp_cuda cannot be found",
    _absent("fused_weight_gradient_mlp_cuda"),
)
PYTHON_BEFORE_3_12 = Condition(
    "PYTHON_BEFORE_3_12",
    "Python is older than 3.12 (typing.override is missing)",
    lambda: sys.version_info < (3, 12),
)
CUDA_ON_CPU_ON = Condition(
    "CUDA_ON_CPU_ON",
    "the CUDA-on-CPU transfer is on (unless FL_PATCH_CUDA_ON_CPU=0 / --no-cuda-on-cpu)",
    _cuda_on_cpu_on,
)

ALL: tuple[Condition, ...] = (TE_ABSENT, APEX_AND_TE_ABSENT, WGRAD_EXTENSION_ABSENT, PYTHON_BEFORE_3_12, CUDA_ON_CPU_ON)
"""Every condition a shipped pack tests (the index checks that no registration depends on another)."""


@contextmanager
def assuming(values: Mapping[Condition, bool]) -> Iterator[None]:
    """Inside, each condition given answers the value given instead of asking the machine (the index only).

    Not thread-safe, and not for a running job: a pack registered under assumptions registers
    patches this machine may not need.
    """
    previous = dict(_ASSUMED)
    _ASSUMED.update({condition.name: value for condition, value in values.items()})
    try:
        yield
    finally:
        _ASSUMED.clear()
        _ASSUMED.update(previous)
