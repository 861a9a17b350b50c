"""Stand-in for ``megatron.core.transformer.moe.ops.paged_stash`` on machines without Triton.

Why: upstream's module does ``import triton`` unconditionally, and plain
``import megatron.core`` reaches it (``pipeline_parallel.schedules`` ->
``transformer.moe.paged_stash`` -> ``ops.paged_stash``), so with a CPU-only torch
nothing of megatron.core imports.

How: the whole module is replaced before its first import by this one, which
exports the same names. The kernels are only launched for MoE paged stashing
(``moe_paged_stash=True``), a CUDA-only feature; launching one here raises with a
message saying so, instead of failing at import for everyone.

Upstream: megatron-core 0.19.2, ``megatron/core/transformer/moe/ops/paged_stash.py``.
Drop when upstream guards the triton import (or when the machine has triton).
"""

from __future__ import annotations

from fl_patch.impls._compat import warn_if_unverified

warn_if_unverified()

GLOBAL_BLOCK_SIZE = 1024

__all__ = ["GLOBAL_BLOCK_SIZE", "paged_stash_copy_kernel", "paged_stash_pop_kernel"]


class _UnavailableKernel:
    """A Triton kernel name that explains, when launched, why it cannot run here."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __getitem__(self, grid: object) -> _UnavailableKernel:
        return self

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(
            f"{self.__name__} is a Triton kernel for MoE paged stashing (moe_paged_stash=True), "
            "which needs a GPU with Triton; fl_patch's CPU pack only lets megatron.core import without it"
        )

    def __repr__(self) -> str:
        return f"<unavailable Triton kernel {self.__name__}>"


paged_stash_copy_kernel = _UnavailableKernel("paged_stash_copy_kernel")
paged_stash_pop_kernel = _UnavailableKernel("paged_stash_pop_kernel")
