"""A factory class: ``WrappedTorchNorm(config, hidden_size, ...)`` builds ``torch.nn.LayerNorm`` or ``RMSNorm``.

The impl of a class target subclasses the original (``isinstance`` checks and ``--check``
need it); here only ``__new__`` changes: RMSNorm is built as ``MyRMSNorm``, every other
case by upstream's ``__new__``. The base class is taken with ``fl_patch.original``, so the
module is right even when imported after the patch is in place.
"""

from __future__ import annotations

from typing import Any

import torch

import fl_patch

_Upstream = fl_patch.original("megatron.core.transformer.torch_norm.WrappedTorchNorm")


class MyRMSNorm(torch.nn.RMSNorm):
    """A vendor's RMSNorm would call its kernel here."""


class WrappedTorchNorm(_Upstream):  # type: ignore[misc,valid-type]
    def __new__(  # type: ignore[misc]
        cls,
        config: Any,
        hidden_size: int,
        eps: float = 1e-5,
        persist_layer_norm: bool = False,
        zero_centered_gamma: bool = False,
        normalization: str = "LayerNorm",
    ) -> torch.nn.Module:
        if config.normalization == "RMSNorm" and not config.sequence_parallel:
            return MyRMSNorm(hidden_size, eps=eps)
        return _Upstream.__new__(cls, config, hidden_size, eps, persist_layer_norm, zero_centered_gamma, normalization)
