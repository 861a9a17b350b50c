"""This project's Triton kernels, each wrapped in a ``torch.autograd.Function``.

Importing any module here imports triton: the megatron-facing impls import them
only when a call can run on them (``_runtime.kernel_unavailable`` says when), so the
pack's registry and impl modules load on machines without triton.

Shared conventions, and why:
- Every kernel takes explicit strides for what it reads and writes, so a strided
  view (a non-contiguous ``dy``, the query slice of a fused QKV projection) is read
  where it lies instead of being copied, and never read as if it were contiguous
  (the bug of FlagGems 5.0.2's ``rms_norm_backward``/``layer_norm_backward``).
  The last dimension must have stride 1; a tensor whose last dimension does not is
  copied once (``rows()``).
- Arithmetic is in fp32 whatever the storage dtype; outputs are rounded once.
- Row statistics saved for backward (rstd, mean, log-sum-exp) are fp32.
"""

from __future__ import annotations

import torch

__all__ = ["num_programs_hint", "rows"]


def rows(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """``tensor`` as a 2-D [rows, width] tensor whose last dimension has stride 1 (a view when possible)."""
    flat = tensor.reshape(-1, width)
    if flat.stride(-1) != 1 and width > 1:
        flat = flat.contiguous()
    return flat


def num_programs_hint(device: torch.device) -> int:
    """How many programs keep the device busy in a persistent-style grid."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count * 4
    return 4  # the CPU interpreter: few programs, each does more rows
