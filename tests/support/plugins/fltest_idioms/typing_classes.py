"""Class impls for megatron's typing classes (issue 43): a subclass of a ``typing.Protocol`` that is
not ``runtime_checkable`` (``issubclass`` against it raises instead of answering), and of a ``TypedDict``."""

from __future__ import annotations

from megatron.core.optimizer_param_scheduler import ParamGroupOverride as _ParamGroupOverride
from megatron.core.transformer.mlp import LinearFc1Builder as _LinearFc1Builder


class LinearFc1Builder(_LinearFc1Builder):
    """A vendor's builder, declared against megatron's protocol."""


class ParamGroupOverride(_ParamGroupOverride, total=False):
    """A "subclass" of a TypedDict: its bases are (dict,), and calling it gives a plain dict."""

    vendor_flag: bool
