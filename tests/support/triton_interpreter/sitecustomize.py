"""Test processes only: Triton's CPU interpreter patches ``triton.language`` once per kernel launch.

``tests/conftest.py: triton_env(interpret=True)`` puts this folder on the ``PYTHONPATH`` of the
interpreter tests' processes. Triton 3.6's interpreter (``triton/runtime/interpreter.py``) swaps
``triton.language``'s builtins for the interpreter's at each kernel launch (``GridExecutor.__call__``,
undone when the launch ends), and again at every call of a ``@triton.jit`` helper from inside the
kernel (``InterpretedFunction.__call__``, never undone). The second swap sets what the launch already
set whenever the helper sees the same language modules as the kernel, and it cost about a fifth of an
interpreter test's CPU time (cProfile of the MoE permutation probe: 20,342 swaps for 1,101 launches,
29.6 s of 140 s). Here a helper call skips it when the running launch has already swapped every
language module the helper sees; any other call goes through Triton's own code. What the kernels
compute does not change: the helper runs with the very builtins it would have set.

Installed when Triton's interpreter module is first imported (a finder that wraps that one module's
loader), so a process that never imports Triton pays nothing. ``TRITON_INTERPRET_PATCH_ONCE=0`` turns it off.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import os
import sys
from types import ModuleType
from typing import Any

_MODULE = "triton.runtime.interpreter"


def _patch_once(interpreter: ModuleType) -> None:
    if not all(hasattr(interpreter, name) for name in ("_patch_lang", "GridExecutor", "tl")):
        return  # another Triton than 3.6's layout: its interpreter runs as it is (slower, the same results)
    original = interpreter._patch_lang
    launch_cls = interpreter.GridExecutor
    language = (interpreter.tl, interpreter.tl.core)
    swapped: list[set[int]] = []  # per launch running (a stack: launches do not nest in practice, but may)

    def _langs(fn: Any) -> set[int]:
        return {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and any(v is m for m in language)}

    def patch_lang(fn: Any) -> Any:
        if swapped:
            langs = _langs(fn)
            if langs and langs <= swapped[-1]:
                return None  # a helper inside a launch that already swapped these modules (return unused there)
            swapped[-1] |= langs
        return original(fn)

    launch_call = launch_cls.__call__

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        swapped.append(set())  # the launch's own swap (Triton's, through patch_lang) fills it
        try:
            return launch_call(self, *args, **kwargs)
        finally:
            swapped.pop()

    interpreter._patch_lang = patch_lang
    launch_cls.__call__ = call


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)  # once: the module is found by the finders after this one
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            _patch_once(module)

        loader.exec_module = exec_then_patch  # type: ignore[method-assign]  # this module's loader instance only
        return spec


if os.environ.get("TRITON_INTERPRET") == "1" and os.environ.get("TRITON_INTERPRET_PATCH_ONCE", "1") != "0":
    sys.meta_path.insert(0, _Finder())
