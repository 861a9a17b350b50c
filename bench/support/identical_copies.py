"""Impls that are identical copies of hot megatron-core functions (bench/overhead.py, train step).

Each copy has the original's code, globals, defaults and closure: the training step
does exactly the same work, so any difference in step time is the cost of the patch.
(Copies of functions, not wrappers: a patch costs what calling its impl costs.)
"""

from __future__ import annotations

import functools
import types

from identical_copies_registry import TARGETS

import fl_patch


def _copy(function: types.FunctionType) -> types.FunctionType:
    copy = types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    return functools.update_wrapper(copy, function, updated=())


def __getattr__(name: str) -> types.FunctionType:
    # Each copy is made when fl_patch asks for it: that is when its target's module has
    # loaded (the four targets live in four modules, loaded at different times).
    if name not in TARGETS:
        raise AttributeError(name)
    copy = _copy(fl_patch.original(TARGETS[name]))
    globals()[name] = copy
    return copy
