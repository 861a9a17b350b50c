"""Class impls that define no ``__init__``: one whose upstream ``__init__`` has a parameter named ``cls``
(``BlendedMegatronDatasetBuilder(cls, sizes, is_built_on_rank, config)``), and ``DynamicGradScaler``."""

from __future__ import annotations

from megatron.core.datasets.blended_megatron_dataset_builder import (
    BlendedMegatronDatasetBuilder as _BlendedMegatronDatasetBuilder,
)
from megatron.core.optimizer.grad_scaler import DynamicGradScaler as _DynamicGradScaler


class BlendedMegatronDatasetBuilder(_BlendedMegatronDatasetBuilder):
    """A vendor's builder: adds nothing."""


class DynamicGradScaler(_DynamicGradScaler):
    """A vendor's scaler that defines no ``__init__``: ``DynamicGradScaler(...)`` takes upstream's arguments."""
