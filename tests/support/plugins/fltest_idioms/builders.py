"""Class impls that define no ``__init__``: one whose upstream ``__init__`` has a parameter named ``cls``
(``BlendedMegatronDatasetBuilder(cls, sizes, is_built_on_rank, config)``), ``DynamicGradScaler``, and a class
whose own ``__new__`` is registered too (``LocalShardsContainer``)."""

from __future__ import annotations

from typing import Any

from megatron.core.datasets.blended_megatron_dataset_builder import (
    BlendedMegatronDatasetBuilder as _BlendedMegatronDatasetBuilder,
)
from megatron.core.dist_checkpointing.strategies.checkpointable import LocalShardsContainer as _LocalShardsContainer
from megatron.core.optimizer.grad_scaler import DynamicGradScaler as _DynamicGradScaler


class BlendedMegatronDatasetBuilder(_BlendedMegatronDatasetBuilder):
    """A vendor's builder: adds nothing."""


class DynamicGradScaler(_DynamicGradScaler):
    """A vendor's scaler that defines no ``__init__``: ``DynamicGradScaler(...)`` takes upstream's arguments."""


class LocalShardsContainer(_LocalShardsContainer):
    """A vendor's tensor container that adds nothing (upstream defines ``__new__``)."""


NEW_CALLS: list[type] = []  # the class each call of the __new__ impl was asked to build


def _local_shards_new(cls: type, local_shards: list[Any]) -> Any:
    """An impl of ``LocalShardsContainer.__new__`` registered beside the class's own patch: upstream's, called."""
    import fl_patch

    NEW_CALLS.append(cls)
    upstream = fl_patch.original(f"{_LocalShardsContainer.__module__}.LocalShardsContainer.__new__")
    return upstream(cls, local_shards)


local_shards_new = staticmethod(_local_shards_new)
