"""``torch.compile`` of a function compiles at the function's first call, not where it is decorated.

Why: importing megatron.core calls ``torch.compile`` about forty times at module level (every
``@jit_fuser`` of ``megatron/core/jit.py``, which is ``torch.compile`` on torch >= 2.2, and
``InferenceTopKRouter._compiled_topk_routing``'s ``@torch.compile`` in ``transformer/moe/router.py``).
The first call imports ``torch._dynamo`` and ``torch._inductor``: measured on this project's 2-core
machine, 1.8 s of CPU of a 4.8 s ``import megatron.core``. A run that calls no compiled function
paid for a compiler it never used, in every megatron process of a job. (The CPU pack also makes
``jit_fuser`` itself return its function as written, ``fusions.eager_jit_fuser``; with that patch
disabled, the forty decorators reach this one again.)

How: for a function (or any callable that is not an ``nn.Module``), the returned function wears the
function's face (``functools.wraps``) and calls torch's ``compile`` with the same arguments at its
first call, once (a lock: two threads do not compile twice), then calls the compiled function, as
the compiled function would have been called from the start; each later call costs one test more
than a call of torch's compiled function. What upstream returns at once is still
returned at once: an ``nn.Module`` (torch's ``OptimizedModule``, whose attributes callers read), a
call torch refuses (``mode`` and ``options`` together: the same error, at the same place), and the
decorator form ``torch.compile(mode=...)`` gives a decorator that makes lazy functions. Called for the
first time while dynamo is already tracing (an outer compiled function calling it), the function runs
its plain code, which dynamo inlines, as it inlines a compiled function's original; once compiled,
dynamo meets torch's compiled function there, as without the patch.

Upstream: torch 2.13 ``torch/__init__.py`` (``compile``); megatron-core 0.19.2 ``megatron/core/jit.py``
and ``megatron/core/transformer/moe/router.py`` (line 918).
Drop when: torch imports its compiler lazily, or megatron decorates without compiling at import.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["compile"]

_TARGET = "torch.compile"


def _torch_compile() -> Callable[..., Any]:
    # The engine's record of torch's function: ``torch.compile`` itself is this impl once installed.
    import fl_patch

    return fl_patch.original(_TARGET)


def _tracing() -> bool:
    # Without dynamo loaded nothing can be tracing, and asking torch.compiler would load it.
    return "torch._dynamo" in sys.modules and torch.compiler.is_compiling()


def compile(model: Any = None, **kwargs: Any) -> Any:
    """Patch for ``torch.compile``: a function is compiled at its first call (module docstring)."""
    if model is None:  # the decorator form, @torch.compile(mode=..., backend=...): applied, it comes back here
        return functools.partial(compile, **kwargs)
    refused = kwargs.get("mode") is not None and kwargs.get("options") is not None
    if isinstance(model, torch.nn.Module) or not callable(model) or refused:
        return _torch_compile()(model, **kwargs)  # at once, as upstream: its module wrapper, or its error
    return _deferred(model, kwargs)


def _deferred(function: Callable[..., Any], kwargs: dict[str, Any]) -> Callable[..., Any]:
    lock = threading.Lock()
    compiled: Callable[..., Any] | None = None

    @functools.wraps(function)
    def compiled_at_first_call(*args: Any, **call_kwargs: Any) -> Any:
        nonlocal compiled
        if compiled is not None:  # every call after the first: one test, then torch's compiled function
            return compiled(*args, **call_kwargs)
        if _tracing():  # not compiled yet, inside an outer trace: compiling here would run inside the trace
            return function(*args, **call_kwargs)
        with lock:
            if compiled is None:
                compiled = _torch_compile()(function, **kwargs)
        return compiled(*args, **call_kwargs)

    return compiled_at_first_call
