"""Where the user's code failed: the file and line a problem message points at.

A plugin's impl that raises while it imports, a registry module that fails on its third line:
the message names the cause (``RuntimeError: broken on purpose``), and without a line of the
user's to go to, finding it took ``--strict --traceback``. :func:`users_line` reads an
exception's traceback for the innermost frame that is neither the import system nor fl_patch;
:class:`LocatedProblemSink` (the process's ``RUNTIME.problems``) adds it to every problem
reported while such an exception is being handled (the engine reports an impl that failed to
import from inside its ``except``), in warnings and strict errors alike. In strict mode it also
drops a closing "upstream code runs instead": the run stops there, nothing runs instead.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import cast

from fl_patch.core.errors import ProblemSink

__all__ = ["LocatedProblemSink", "users_line"]


def _skipped() -> tuple[str, ...]:
    """Directories whose frames are never the user's: the import system's and fl_patch's own."""
    fl_patch = sys.modules[__name__.partition(".")[0]]
    # (both are packages loaded from files: __file__ is set)
    return tuple(os.path.dirname(os.path.abspath(cast(str, m.__file__))) + os.sep for m in (importlib, fl_patch))


def users_line(exc: BaseException) -> tuple[str, int] | None:
    """(file, line) of the innermost frame outside importlib and fl_patch: the user's line that failed."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return exc.filename, exc.lineno  # the line that does not parse, which no frame runs
    skipped = _skipped()
    found = None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith(("<frozen", "<string")) and not os.path.abspath(filename).startswith(skipped):
            found = (filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


# What a message says happens instead of the patch: untrue once strict mode stops the run there.
_FALLBACK_ENDINGS = ("; upstream code runs instead", ", upstream code runs", "; upstream code runs")


def _without_fallback(message: str) -> str:
    for ending in _FALLBACK_ENDINGS:
        if message.endswith(ending):
            return message[: -len(ending)]
    return message


class LocatedProblemSink(ProblemSink):
    """A ``ProblemSink`` whose messages, reported while an exception is handled, end with the user's failing line."""

    def problem(self, message: str, *, where: tuple[str, int] | None = None) -> None:
        if self.strict:
            message = _without_fallback(message)
        handled = sys.exc_info()[1]
        line = users_line(handled) if handled is not None else None
        if line is not None and line != where and line[0] not in message:
            cause, sep, after = message.rpartition("; ")
            place = f" (raised at {line[0]}:{line[1]})"
            if sep and after.startswith(("upstream code runs", "trying vendor")):
                message = f"{cause}{place}{sep}{after}"  # next to the cause, before what happens instead
            else:
                message += place
        super().problem(message, where=where)
