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
is printed and the exit status is 1.

**The exit runs everything a normal exit runs.** The status can only be changed by
``os._exit`` (``SystemExit`` in an atexit handler is printed and ignored), which skips
whatever has not run yet: the program's own atexit handlers (a checkpoint, a
``wandb.finish``) and fl_patch's report, which would then be empty exactly when there
was a problem. atexit runs handlers last-registered first, so the check is registered
as early as fl_patch can: by the bootstrap, before the program's first line, when strict
mode is asked (``register_exit_check``); by ``arm`` otherwise. When it stops it is the
last handler left (but those registered before it: another ``sitecustomize``'s, or the
program's before ``fl_patch.install()``); it writes the exit report itself if that has
not run, shuts logging down and flushes the streams, then ``os._exit(1)``.

``disarm`` (called by ``uninstall()``) takes out what ``arm`` put in: the excepthook
(where it is still ours) and the exit check.

The exit check also says (a warning; strict: exit status 1) when a module that owns a
target was imported but never seen by the hook (another import hook took it, or
``sys.meta_path`` was reset), and fl_patch never caught up with it.
"""

from __future__ import annotations

import atexit
import os
import sys
import types

from fl_patch.core.errors import FlPatchError, warn
from fl_patch.runtime import RUNTIME

__all__ = ["arm", "disarm", "register_exit_check"]


def register_exit_check() -> None:
    """Put the exit check in atexit's list now, early, so that it runs after the handlers registered later.

    It does nothing at exit unless ``arm`` ran (strict mode on when fl_patch installed).
    """
    state = RUNTIME.strict
    if not state.registered:
        state.registered = True
        atexit.register(_at_exit)


def arm() -> None:
    """Install the excepthook and the exit check (once per installation)."""
    state = RUNTIME.strict
    if state.armed:
        return
    state.armed = RUNTIME.exit_check = True
    if sys.excepthook is not _excepthook:
        state.previous_hook = sys.excepthook
        sys.excepthook = _excepthook
    register_exit_check()


def disarm() -> None:
    """Take out what ``arm`` put in (``uninstall()``): the excepthook where it is still ours, the exit check."""
    state = RUNTIME.strict
    if sys.excepthook is _excepthook:
        sys.excepthook = state.previous_hook if state.previous_hook is not None else sys.__excepthook__
    state.previous_hook = None
    if state.registered:
        atexit.unregister(_at_exit)
    state.armed = state.registered = RUNTIME.exit_check = False


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
    hook = RUNTIME.strict.previous_hook if RUNTIME.strict.previous_hook is not None else sys.__excepthook__
    hook(kind, value, tb)


def _at_exit() -> None:
    if not RUNTIME.strict.armed:
        return
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
    exit_report = sys.modules.get("fl_patch.reporting.exit_report")
    try:
        if exit_report is not None:
            exit_report.report_now()  # registered before this check, it would not run after os._exit
    except Exception:  # noqa: BLE001  (the report says its own problems; the stop must happen)
        pass
    logging = sys.modules.get("logging")
    try:
        if logging is not None:
            logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    finally:
        os._exit(1)
