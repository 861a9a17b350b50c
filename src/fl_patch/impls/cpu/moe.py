"""megatron-core's MoE token dispatch on a CPU (expert parallelism over gloo).

Each impl's docstring gives Why (the upstream line), How, the upstream reference and when it
can be dropped.
"""

from __future__ import annotations

from typing import Any

import torch

import fl_patch
from fl_patch.impls._compat import warn_if_unverified

__all__ = ["maybe_move_tensor_to_cpu"]

warn_if_unverified()

_TARGET = "megatron.core.transformer.moe.moe_utils.maybe_move_tensor_to_cpu"


def maybe_move_tensor_to_cpu(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
    """Patch for ``megatron.core.transformer.moe.moe_utils.maybe_move_tensor_to_cpu``.

    Why: the alltoall token dispatcher moves its split sizes to the host with this function
    (``token_dispatcher.py`` ``_maybe_dtoh_and_synchronize``), asking for numpy arrays
    (``as_numpy=True``), which ``all_to_all_single`` takes as its ``output_split_sizes`` /
    ``input_split_sizes``. Upstream converts only a tensor that ``is_cuda`` (``moe_utils.py``
    line 1184); on a CPU the splits stay tensors and gloo's ``all_to_all_single`` refuses them:
    ``TypeError: all_to_all_single(): incompatible function arguments`` at the first MoE layer
    with ``expert_model_parallel_size > 1``.
    How: a CPU tensor asked for as numpy becomes numpy (what a CUDA tensor becomes upstream);
    everything else goes to upstream.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/transformer/moe/moe_utils.py``.
    Drop when: upstream converts by ``as_numpy`` rather than by the tensor's device.
    """
    if as_numpy and torch.is_tensor(tensor) and tensor.device.type == "cpu":
        return tensor.numpy()
    return fl_patch.original(_TARGET)(tensor, as_numpy=as_numpy, record_stream=record_stream)
