"""FlagScale's ``megatron.plugin.decorators``, served by fl_patch.

When no real FlagScale ``megatron.plugin.decorators`` is installed, the import hook
serves this module under that name, so an unchanged FlagScale plugin tree
(``megatron/plugin/override_registry.py`` doing
``from megatron.plugin.decorators import register``) feeds fl_patch's registry.
``overridable`` is a pass-through: upstream Megatron is not edited, so nothing
carries the decorator, but code written for FlagScale may still import it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeVar

from ._runtime import RUNTIME

if TYPE_CHECKING:
    from ._registry import Registration

__all__ = ["overridable", "register"]

T = TypeVar("T")


def register(target: str, impl: object, vendor: str = "default") -> Registration:
    """FlagScale's ``register(target=..., impl=..., vendor=...)``."""
    caller = sys._getframe(1)
    return RUNTIME.registry.register(
        target,
        impl,
        vendor,
        source=str(caller.f_globals.get("__name__", "?")),
        where=(caller.f_code.co_filename, caller.f_lineno),
    )


def overridable(obj: T) -> T:
    """FlagScale's marker decorator; with fl_patch nothing needs marking."""
    return obj
