"""The "CUDA" RNG of ``megatron.core.tensor_parallel.random`` on the CPU.

On a CPU the generator that dropout (and every other op) draws from is the CPU default
generator, so megatron's "CUDA RNG state" *is* that generator's state. Reading and
seeding it goes through the module's CPU view of torch (``torch_names.TENSOR_PARALLEL_RANDOM``);
setting it needs the function below, because upstream's version does nothing, without
saying so, on a CPU-only torch: the RNG tracker then never switches state, dropout draws
from the wrong stream, and the loss changes (activation recompute stops reproducing the
forward pass's dropout masks, tensor-parallel ranks stop agreeing where they should).

Upstream: megatron-core 0.19.2, ``megatron/core/tensor_parallel/random.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from megatron.core.tensor_parallel import random as tp_random

from fl_patch.impls._compat import warn_if_unverified

__all__ = ["fork", "set_cuda_rng_state"]

warn_if_unverified()

_GRAPH_SAFE = (
    "a CUDA-graph-safe RNG state (use_cudagraphable_rng, CUDA graphs) needs a CUDA generator; "
    "the CPU generator cannot provide one: leave CUDA graphs off on a CPU"
)


def set_cuda_rng_state(new_state: torch.Tensor, device: int | str = -1, graph_safe: bool = False) -> None:
    """Patch for ``tensor_parallel.random._set_cuda_rng_state``.

    Why: upstream (``random.py``, ``_set_cuda_rng_state``) wraps the state change in a
    callback handed to ``torch.cuda._lazy_call(cb)``. Without CUDA, ``_lazy_call`` only
    queues the callback for a CUDA initialisation that never happens: the state is
    **silently never set**. The RNG tracker's ``add``/``fork`` and activation recompute
    then run with whatever state the generator happens to be in, and the loss changes.
    How: sets the CPU default generator's state, now (``torch.set_rng_state`` copies the
    state, so later draws never write into ``new_state``).
    Upstream reference: megatron-core 0.19.2, ``megatron/core/tensor_parallel/random.py``,
    ``_set_cuda_rng_state``.
    Drop when: upstream sets the RNG state through a device-agnostic API.
    """
    if graph_safe:
        raise NotImplementedError(_GRAPH_SAFE)
    torch.set_rng_state(new_state)


@contextlib.contextmanager
def fork(
    self: tp_random.CudaRNGStatesTracker, name: str = tp_random._MODEL_PARALLEL_RNG_TRACKER_NAME
) -> Iterator[None]:
    """Patch for ``tensor_parallel.random.CudaRNGStatesTracker.fork``.

    Why: upstream's ``fork`` records ``torch.get_rng_state()`` (the CPU generator) after
    switching to the tracked "CUDA" state and, on exit, logs
    ``'CPU RNG state changed within GPU RNG context'`` if it differs. On a CPU the two are
    the same generator, so every fork in which dropout draws a number logs that warning
    (once per layer per micro-batch) and pays a full state comparison.
    How: the same switching as upstream (save the outer state, run with the tracked state,
    store the advanced tracked state, restore the outer one, keep ``_current_state_name``
    consistent for nested forks), through the module's patched state functions, without
    the CPU-versus-GPU comparison that cannot hold here.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/tensor_parallel/random.py``,
    ``CudaRNGStatesTracker.fork``.
    Drop when: upstream skips that check when the CUDA generator is the CPU one.
    """
    if name not in self.states_:
        raise Exception(f"cuda rng state {name} is not added")
    graph_safe = self.use_cudagraphable_rng
    outer_name = self._current_state_name
    outer_state = tp_random._get_cuda_rng_state(graph_safe=graph_safe)
    if outer_name != "default-rng":
        self.states_[outer_name] = outer_state
    tp_random._set_cuda_rng_state(self.states_[name], graph_safe=graph_safe)
    self._current_state_name = name
    try:
        yield
    finally:
        if self._current_state_name != name:
            raise Exception(
                f"current state name {self._current_state_name} is not the same as the desired state name {name}."
            )
        self.states_[name] = tp_random._get_cuda_rng_state(graph_safe=graph_safe)
        if outer_name != "default-rng":
            outer_state = self.states_[outer_name]
        tp_random._set_cuda_rng_state(outer_state, graph_safe=graph_safe)
        self._current_state_name = outer_name
