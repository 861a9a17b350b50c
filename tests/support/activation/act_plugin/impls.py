"""Impls that say they ran, and call through to upstream."""

from __future__ import annotations

import fl_patch


def greet(name: str, punctuation: str = "!") -> str:
    return "patched " + fl_patch.original("act_target.mod.greet")(name, punctuation)


def hello(self: object, name: str) -> str:
    return "patched " + fl_patch.original("act_target.mod.Greeter.hello")(self, name)


def never(x: int) -> int:
    return -x
