"""Fused CUDA kernels megatron-core would choose even when they cannot run."""

from __future__ import annotations

from typing import Any

from ._compat import warn_if_unverified

__all__ = ["fused_softmax_kernel_available"]

warn_if_unverified()


def fused_softmax_kernel_available(self: Any, mask: Any, b: int, np: int, sq: int, sk: int) -> bool:
    """Patch for ``fusions.fused_softmax.FusedScaleMaskSoftmax.is_kernel_available``.

    Why: upstream (``fused_softmax.py``, ``FusedScaleMaskSoftmax.is_kernel_available``)
    decides from the shapes and ``masked_softmax_fusion`` (True by default in
    ``TransformerConfig``) alone; for fp16/bf16 attention with suitable shapes it calls
    ``get_batch_per_block``, which does ``import scaled_masked_softmax_cuda`` (a CUDA
    extension): ``ModuleNotFoundError`` in the first attention forward pass.
    How: the fused kernel never exists on a CPU, so this answers False and
    ``forward_torch_softmax`` (upstream's own fallback, same maths) runs.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/fusions/fused_softmax.py``.
    Drop when: upstream checks that the extension imports (or the tensor's device)
    before choosing the kernel.
    """
    return False
