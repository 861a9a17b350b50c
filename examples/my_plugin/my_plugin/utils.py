"""Replace pattern: upstream's ``divide`` asserts; this one says what was divided."""

from __future__ import annotations


def divide(numerator: int, denominator: int) -> int:
    if denominator == 0 or numerator % denominator:
        raise ValueError(f"{numerator} is not divisible by {denominator}")
    return numerator // denominator
