"""Impls for real megatron-core targets, used by the activation tests."""

from __future__ import annotations

import fl_patch


def divide(numerator: int, denominator: int) -> tuple[str, int]:
    return ("patched", fl_patch.original("megatron.core.utils.divide")(numerator, denominator))
