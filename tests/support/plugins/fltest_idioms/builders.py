"""A class impl whose upstream ``__init__`` has a parameter named ``cls``
(``BlendedMegatronDatasetBuilder(cls, sizes, is_built_on_rank, config)``)."""

from __future__ import annotations

from megatron.core.datasets.blended_megatron_dataset_builder import (
    BlendedMegatronDatasetBuilder as _BlendedMegatronDatasetBuilder,
)


class BlendedMegatronDatasetBuilder(_BlendedMegatronDatasetBuilder):
    """A vendor's builder: adds nothing."""
