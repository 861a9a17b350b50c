"""A factory-class impl written as docs/writing-a-plugin.md says: override ``__new__`` of megatron's
``WrappedTorchNorm`` (whose ``__new__`` returns a torch norm, not an instance of itself)."""

from __future__ import annotations

from typing import Any

import torch

import fl_patch

_Upstream = fl_patch.original("megatron.core.transformer.torch_norm.WrappedTorchNorm")


class VendorRMSNorm(torch.nn.RMSNorm):
    """What a vendor's ``__new__`` builds instead of torch's RMSNorm."""


class WrappedTorchNorm(_Upstream):  # type: ignore[misc,valid-type]
    """RMSNorm built as ``VendorRMSNorm``; anything else by upstream's ``__new__``, called by name."""

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5, *rest: Any, **named: Any) -> Any:  # type: ignore[misc]
        if config.normalization == "RMSNorm":
            return VendorRMSNorm(hidden_size, eps=eps)
        return _Upstream.__new__(cls, config, hidden_size, eps, *rest, **named)


class SuperWrappedTorchNorm(_Upstream):  # type: ignore[misc,valid-type]
    """The same, reaching upstream's ``__new__`` through ``super()``."""

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5, *rest: Any, **named: Any) -> Any:  # type: ignore[misc]
        if config.normalization == "RMSNorm":
            return VendorRMSNorm(hidden_size, eps=eps)
        return super().__new__(cls, config, hidden_size, eps, *rest, **named)
