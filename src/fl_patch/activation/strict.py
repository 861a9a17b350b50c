"""Strict mode's two promises: a clear message, and a run that stops.

**One clear message.** A strict error is raised inside an import, often many imports
deep in megatron, so Python's report of it is 30 to 100 lines of import machinery. The
excepthook installed here prints it as what it is (the message, which names the target,
the impl and the cause) and one line on how to see the traceback
(``FL_PATCH_TRACEBACK=1``). Any other exception is reported as Python would.

**A run that stops.** Upstream code wraps many imports in ``try/except``: a strict error
raised there is swallowed and the program runs on, unpatched, which is what strict mode
exists to prevent. Every strict error is kept (``ProblemSink.failures``) until it
reaches the excepthook. One that has not is raised again at the next watched import
(``Engine.before_exec``); and at exit, if it still never ended the process, the message
is printed and the exit status is 1 (``os._exit``, after flushing the standard streams
and logging).

The exit check also says (a warning; strict: exit status 1) when a module that owns a
target was imported but never seen by the hook (another import hook took it, or
``sys.meta_path`` was reset), and fl_patch never caught up with it.
"""

from __future__ import annotations

import atexit
import os
import sys
import types
from collections.abc import Callable

from fl_patch.activation.runtime import RUNTIME
from fl_patch.core.errors import FlPatchError, warn

__all__ = ["arm"]

_previous_hook: Callable[..., object] | None = None


def arm() -> None:
    """Install the excepthook and the exit check (once per process)."""
    global _previous_hook
    if RUNTIME.exit_check:
        return
    RUNTIME.exit_check = True
    _previous_hook = sys.excepthook
    sys.excepthook = _excepthook
    atexit.register(_at_exit)


def _strict_error(exc: BaseException | None) -> FlPatchError | None:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, FlPatchError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _excepthook(kind: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> None:
    error = _strict_error(value)
    if error is not None:
        sink = RUNTIME.problems
        sink.delivered.update(id(e) for e in sink.failures)  # the process ends with it
        if os.environ.get("FL_PATCH_TRACEBACK", "").strip() not in ("1", "true", "yes", "on"):
            sys.stderr.write(
                f"FlPatchError: {error}\n(FL_PATCH_STRICT=1 stops the run here; FL_PATCH_TRACEBACK=1 shows where)\n"
            )
            return
    hook = _previous_hook if _previous_hook is not None else sys.__excepthook__
    hook(kind, value, tb)


def _at_exit() -> None:
    try:
        engine = RUNTIME.engine if RUNTIME.installed else None
        missed = engine.unprocessed_modules() if engine is not None else []
        if missed:
            message = (
                "fl_patch: these modules own registered targets but were imported without passing through "
                f"fl_patch's import hook, and were never patched: {', '.join(missed)} (another import hook "
                "handled them, or sys.meta_path was reset)"
            )
            if RUNTIME.problems.strict:
                _stop(f"FlPatchError: {message}")
            warn(message, stacklevel=1)
        swallowed = RUNTIME.problems.swallowed()
        if swallowed is not None:
            _stop(
                f"FlPatchError: {swallowed}\n"
                "(FL_PATCH_STRICT=1: the program caught this error and went on; the run stops now)"
            )
    except Exception:  # noqa: BLE001  (an exit check must never turn a clean exit into a traceback)
        pass


def _stop(message: str) -> None:
    logging = sys.modules.get("logging")
    try:
        if logging is not None:
            logging.shutdown()  # type: ignore[attr-defined]
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    finally:
        os._exit(1)
