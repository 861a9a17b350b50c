"""Class impls for megatron's typing classes (issue 43): a subclass of a ``typing.Protocol`` that is
not ``runtime_checkable`` (``issubclass`` against it raises instead of answering)."""

from __future__ import annotations

from megatron.core.transformer.mlp import LinearFc1Builder as _LinearFc1Builder


class LinearFc1Builder(_LinearFc1Builder):
    """A vendor's builder, declared against megatron's protocol."""
