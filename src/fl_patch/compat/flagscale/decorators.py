"""FlagScale's ``megatron.plugin.decorators`` for fl_patch: served when a tree has none, joined when it has one.

A plugin tree without ``megatron/plugin/decorators.py`` gets this module under that name:
the tree's ``override_registry.py`` (``from megatron.plugin.decorators import register``)
then registers straight into fl_patch. ``overridable`` is a pass-through: upstream
Megatron is not edited, so nothing carries the decorator, but code written for FlagScale
may still import it.

A tree with its own ``decorators.py`` (FlagScale's Megatron-LM-FL) keeps it, and
``take_over`` wraps that module's ``register`` the moment its body has run: every call
still goes to the tree's own registry, unchanged, and also to fl_patch's, pointing at the
line that made it. See ``compat.flagscale_tree``.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fl_patch.runtime import RUNTIME

if TYPE_CHECKING:
    from fl_patch.core.registration import Registration

__all__ = ["overridable", "register", "registrations_seen", "take_over"]

T = TypeVar("T")

_SOURCES_SEEN: set[str] = set()  # modules whose register() calls reached fl_patch


def _register_here(target: str, impl: object, vendor: str, frame: types.FrameType) -> Registration:
    source = str(frame.f_globals.get("__name__", "?"))
    _SOURCES_SEEN.add(source)
    return RUNTIME.registry.register(
        target, impl, vendor, source=source, where=(frame.f_code.co_filename, frame.f_lineno)
    )


def register(target: str, impl: object, vendor: str = "default") -> Registration:
    """FlagScale's ``register(target=..., impl=..., vendor=...)``."""
    return _register_here(target, impl, vendor, sys._getframe(1))


def overridable(obj: T) -> T:
    """FlagScale's marker decorator; with fl_patch nothing needs marking."""
    return obj


def take_over(decorators: types.ModuleType) -> None:
    """Make a real tree's ``decorators.register`` register in fl_patch too (once)."""
    tree_register: Callable[..., object] = decorators.register
    if getattr(tree_register, "fl_patch_forwards", False):
        return

    @functools.wraps(tree_register)
    def register_in_both(target: str, impl: object, vendor: str = "default") -> object:
        result = tree_register(target, impl, vendor)  # the tree's own registry, exactly as before
        try:
            _register_here(target, impl, vendor, sys._getframe(1))
        except ValueError as exc:  # FlagScale accepts any string; fl_patch says what it cannot use
            RUNTIME.problems.problem(f"fl_patch: the FlagScale tree registered something unusable: {exc}")
        return result

    register_in_both.fl_patch_forwards = True  # type: ignore[attr-defined]
    decorators.register = register_in_both  # type: ignore[attr-defined]  # replaces the tree's function on its module


def registrations_seen(source: str) -> bool:
    """Whether ``register()`` calls of module ``source`` reached fl_patch's registry."""
    return source in _SOURCES_SEEN
