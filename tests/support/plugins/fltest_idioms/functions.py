"""Function impls written the way users write them (issue 43): other parameter names, string
annotations naming this module's own types, decorators, FlagScale's ``Target.__wrapped__``."""

from __future__ import annotations

from typing import Any

import torch

Number = float  # an annotation that exists only here: typing must resolve it in this module


def divide(a: Number, b: Number) -> Number:
    """``megatron.core.utils.divide(numerator, denominator)``, with its own parameter names."""
    return a / b * 10


def attention_mask_func(s: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``megatron.core.transformer.utils.attention_mask_func(attention_scores, attention_mask)``."""
    return s.masked_fill(m, -1000.0)


def anything(*args: Any, **kwargs: Any) -> Any:
    """A pass-through impl: its signature says nothing, upstream's must show."""
    import megatron.core.utils as utils

    return utils.divide.__wrapped__(*args, **kwargs)


@torch.no_grad()
def divide_no_grad(numerator: Number, denominator: Number) -> Number:
    """Decorated (functools.wraps inside): calls upstream the FlagScale way, through ``__wrapped__``."""
    import megatron.core.utils as utils

    return utils.divide.__wrapped__(numerator, denominator) + 1
