"""Which functions fl_patch may write attributes on: a plugin's own, never a library's.

fl_patch marks the function it installs with ``__wrapped__`` (the upstream original, as
FlagScale's ``@overridable`` does, so impls can call ``Target.__wrapped__(...)``) and
``__signature__`` (its own, which ``inspect.signature`` would otherwise follow to the
original). On a plugin's impl that is what the plugin asked for. On a library function used
directly as an impl (``torch.nn.functional.silu`` standing in for a megatron activation) it
would change the library for every other caller: ``inspect.unwrap(F.silu)`` would return a
megatron function. Such a function is installed as fl_patch's own copy (``core.apply``), and
only the copy carries the marks.

A function is a library's when its module is part of the standard library, or its file lies
in an installed distribution that registers nothing with fl_patch (no ``fl_patch.registries``
entry point). Everything else — fl_patch's packs, a plugin directory on ``PYTHONPATH``, the
user's script, a FlagScale tree's ``megatron/plugin`` (a source tree, not the installed
``megatron-core``), an installed plugin distribution — is plugin code.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
import types

__all__ = ["is_library_function"]

_ENTRY_POINT_GROUP = "fl_patch.registries"  # activation.sources reads the same group


def is_library_function(function: types.FunctionType) -> bool:
    """Whether ``function`` belongs to a library fl_patch must not write on (see the module doc)."""
    top = (function.__module__ or "").partition(".")[0]
    if top == "fl_patch":
        return False
    if top in sys.stdlib_module_names or top == "builtins":
        return True
    filename = os.path.realpath(function.__code__.co_filename)
    return any(filename.startswith(root) for root in _library_roots(top))


@functools.cache
def _library_roots(top: str) -> tuple[str, ...]:
    """The directories where installed distributions without fl_patch registries hold ``top``.

    Cached per top-level name: the mapping reads every installed distribution's metadata
    once (tens of ms), and only for an impl outside fl_patch and the standard library.
    """
    roots: list[str] = []
    for name in _top_level_distributions().get(top, ()):
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if any(ep.group == _ENTRY_POINT_GROUP for ep in distribution.entry_points):
            continue  # a plugin distribution: its functions are plugin code
        located = os.path.realpath(str(distribution.locate_file(top)))
        roots.extend((located + os.sep, located + ".py"))
    return tuple(roots)


@functools.cache
def _top_level_distributions() -> dict[str, list[str]]:
    try:
        return dict(importlib.metadata.packages_distributions())
    except Exception:  # noqa: BLE001  (broken metadata somewhere: then nothing counts as a library by file)
        return {}
