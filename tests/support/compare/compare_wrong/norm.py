"""A norm whose backward drops the weight gradient (its own module: it subclasses upstream's class, taken
with ``fl_patch.original`` when ``torch_norm`` has loaded)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import fl_patch


class _NoWeightGradLayerNorm(torch.nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight.detach(), self.bias, self.eps)  # WRONG: no dweight


class _NoWeightGradRMSNorm(torch.nn.RMSNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight.detach(), self.eps)  # WRONG: no dweight


class WrappedTorchNorm(fl_patch.original("megatron.core.transformer.torch_norm.WrappedTorchNorm")):  # type: ignore[misc]
    """Builds norms whose forward is right and whose backward gives the weight no gradient."""

    def __new__(  # type: ignore[misc]
        cls,
        config: Any,
        hidden_size: int,
        eps: float = 1e-5,
        persist_layer_norm: bool = False,
        zero_centered_gamma: bool = False,
        normalization: str = "LayerNorm",
    ) -> torch.nn.Module:
        norm = _NoWeightGradRMSNorm if config.normalization == "RMSNorm" else _NoWeightGradLayerNorm
        return norm(hidden_size, eps=eps)
