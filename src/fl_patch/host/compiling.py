"""Whether ``torch.compile`` is tracing right now, for fl_patch's own wrappers (report and compare modes).

A wrapper that counts or compares must do nothing but call the impl while Dynamo traces (counting
inside a graph would break ``fullgraph=True`` or recompile on every call). Dynamo reads
``torch.compiler.is_compiling()`` as a constant while tracing, so the wrappers call exactly that
function. torch is never imported for it: one that finds it later stands in until torch is loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["is_compiling_function"]


def is_compiling_function() -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` if torch is loaded, else a function that looks for it when called."""
    found = getattr(getattr(sys.modules.get("torch"), "compiler", None), "is_compiling", None)
    if callable(found):
        return found

    def later() -> bool:
        check = getattr(getattr(sys.modules.get("torch"), "compiler", None), "is_compiling", None)
        return bool(check()) if callable(check) else False

    return later
