"""Report mode (``--report``, ``FL_PATCH_REPORT=1``): count calls, say at exit what happened.

Imported only in report mode. ``enable()`` sets the engine's ``call_counter``, so
every function or method replacement is wrapped, before it is installed, in a
counting function; at interpreter exit the process prints (or appends to
``FL_PATCH_REPORT_FILE``) what was applied, how often each patched target was
called, what never triggered and what failed.

Why a plain function made with ``functools.wraps(impl, updated=())`` and not a
wrapt proxy: ``torch.compile`` inlines a proxy's ``__code__`` (the impl's, or
worse, the original's) and never calls the wrapper, and proxies do not pickle.
``updated=()`` keeps the impl's ``__dict__`` (which may hold
``_torchdynamo_orig_callable``) off the wrapper. The wrapper keeps the impl's
``__module__``: the engine reads it to leave the impl's own module out of the
alias sweep.

What is counted, and what is not, so the numbers are never mistaken for more than
they are:

- plain Python functions and ``async def`` functions installed for function and
  method targets. Classes, modules, attributes, generators, partials and other
  callables are installed as they are and reported with no count.
- calls made while ``torch.compile`` traces or runs compiled code are not counted
  (``torch.compiler.is_compiling()`` is true there; counting inside a graph would
  either break ``fullgraph=True`` or recompile on every call).
- a forked child (``fork`` start method, dataloader workers) exits through
  ``os._exit`` and prints nothing; spawn and forkserver children, torchrun workers
  and subprocesses that exit normally print their own report.

Known cost of report mode: a counted function is a different object from the
impl, so pickling it by reference (``pickle.dumps(patched_function)``) fails with
"not the same object". Report mode is for diagnosis runs.
"""

from __future__ import annotations

import atexit
import errno
import functools
import inspect
import itertools
import json
import os
import sys
import textwrap
import threading
import types
from collections.abc import Callable
from dataclasses import replace

from fl_patch.activation.runtime import RUNTIME
from fl_patch.core.apply import stands_for
from fl_patch.core.records import PatchRecord, Status

__all__ = ["CallCounts", "counted_records", "enable", "format_report", "make_counter", "redact_argv"]


class CallCounts:
    """One counter per target, kept across re-installs and reloads: the process's totals."""

    def __init__(self) -> None:
        self.counters: dict[str, itertools.count[int]] = {}
        self.lock = threading.Lock()
        self.atexit_registered = False


def _counts() -> CallCounts:
    if RUNTIME.call_counts is None:
        RUNTIME.call_counts = CallCounts()
    return RUNTIME.call_counts


def _never_compiling() -> bool:
    return False


def _is_compiling_function() -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` if torch is loaded (it always is under megatron)."""
    torch = sys.modules.get("torch")
    compiler = getattr(torch, "compiler", None)
    is_compiling = getattr(compiler, "is_compiling", None)
    return is_compiling if callable(is_compiling) else _never_compiling


def _counter_for(target: str) -> itertools.count[int]:
    # next() on itertools.count is atomic under the GIL: no lock per call.
    counts = _counts()
    with counts.lock:
        counter = counts.counters.get(target)
        if counter is None:
            counter = counts.counters[target] = itertools.count(1)
        return counter


def calls(target: str) -> int | None:
    """How many calls were counted through ``target``'s patch, or None if none was counted."""
    counter = _counts().counters.get(target)
    if counter is None:
        return None
    # repr is "count(N)" where N is the next value; counting started at 1.
    return int(repr(counter)[len("count(") : -1]) - 1


def make_counter(target: str, replacement: object) -> object:
    """The engine's ``call_counter``: a counting stand-in for ``replacement``, or itself."""
    if not isinstance(replacement, types.FunctionType):
        return replacement
    if inspect.isgeneratorfunction(replacement) or inspect.isasyncgenfunction(replacement):
        return replacement  # a wrapper would change what inspect says the function is
    counter = _counter_for(target)
    is_compiling = _is_compiling_function()
    impl = replacement
    tick = counter.__next__

    if inspect.iscoroutinefunction(impl):

        async def counted_async(*args: object, **kwargs: object) -> object:
            if not is_compiling():
                tick()
            return await impl(*args, **kwargs)

        wrapper: types.FunctionType = counted_async
    else:

        def counted(*args: object, **kwargs: object) -> object:
            if not is_compiling():
                tick()
            return impl(*args, **kwargs)

        wrapper = counted
    functools.update_wrapper(wrapper, impl, updated=())
    # Not the impl: the installed object's __wrapped__ is the upstream original (``core.apply``),
    # which impls written for FlagScale call; pointing it at the impl would make them recurse.
    del wrapper.__wrapped__
    try:
        wrapper.__signature__ = inspect.signature(impl)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    stands_for(wrapper, impl)  # the impl gets the marks it would get installed itself
    return wrapper


def enable() -> None:
    """Count calls through every function patch the engine installs; report at exit."""
    RUNTIME.engine.call_counter = make_counter
    counts = _counts()
    if not counts.atexit_registered:
        counts.atexit_registered = True
        atexit.register(_report_at_exit)


def counted_records(records: list[PatchRecord]) -> list[PatchRecord]:
    """``records`` with ``calls`` filled in for the registration that runs."""
    out = []
    for record in records:
        if record.status is Status.APPLIED and record.vendor == record.chosen_vendor:
            record = replace(record, calls=calls(record.target))
        out.append(record)
    return out


def _process_label() -> str:
    label = f"pid {os.getpid()}"
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None:
        label += f", rank {rank}" + (f" of {world}" if world else "")
    argv = getattr(sys, "argv", None) or ["?"]
    return f"{label}, {os.path.basename(str(argv[0])) or argv[0]}"


def format_report(records: list[PatchRecord]) -> str:
    """The text report: a summary line, then what ran, what never triggered, what failed."""
    chosen = [r for r in records if r.vendor == r.chosen_vendor or r.status.is_problem]
    applied = [r for r in chosen if r.status is Status.APPLIED]
    waiting = [r for r in chosen if r.status is Status.WAITING]
    problems = [r for r in records if r.status.is_problem]
    idle = [r for r in applied if r.calls == 0]
    head = (
        f"fl_patch report ({_process_label()}): {len(applied)} applied, "
        f"{len(waiting)} never triggered, {len(problems)} problem(s), {len(idle)} applied but never called"
    )
    if not records:
        return f"fl_patch report ({_process_label()}): no registered target was imported in this process"
    if not applied and not problems:
        return head + " (no registered target was imported in this process)"
    lines = [head, *_rows(applied + problems)]
    if waiting:
        lines += textwrap.wrap(
            "never triggered (their modules were not imported): " + ", ".join(r.target for r in waiting),
            REPORT_WIDTH,
            subsequent_indent="  ",
            break_on_hyphens=False,
        )
    return "\n".join(lines)


# A report is read in a terminal or a CI log: no line wider than this (a dotted path may be, alone).
REPORT_WIDTH = 120


def _rows(records: list[PatchRecord]) -> list[str]:
    """One line per record (status, calls, vendor, target), the impl and the detail indented under it.

    A table with a column each for target, impl and detail ran past 200 columns.
    """
    if not records:
        return []
    status_width = max(len("status"), *(len(r.status.value) for r in records))
    calls_width = max(len("calls"), *(len(_calls(r)) for r in records))
    vendor_width = max(len("vendor"), *(len(r.chosen_vendor or "-") for r in records))
    lines = [f"{'status':<{status_width}}  {'calls':>{calls_width}}  {'vendor':<{vendor_width}}  target / impl"]
    for r in records:
        lines.append(
            f"{r.status.value:<{status_width}}  {_calls(r):>{calls_width}}  {r.chosen_vendor or '-':<{vendor_width}}  {r.target}"
        )
        indent = " " * (status_width + calls_width + vendor_width + 6)
        under = f"{indent}-> {r.impl}" + (f"  ({r.detail})" if r.detail else "")
        lines += textwrap.wrap(under, REPORT_WIDTH, subsequent_indent=indent + "   ", break_on_hyphens=False) or [under]
    return lines


def _calls(record: PatchRecord) -> str:
    return "-" if record.calls is None else str(record.calls)


def _report_at_exit() -> None:
    if not RUNTIME.installed and RUNTIME.call_counts is None:
        return
    engine = RUNTIME.engine
    try:
        settings = engine.settings
        # detect=False: never import torch during shutdown just to name the platform.
        records = counted_records(engine.records(detect=False))
        if settings.report_file:
            _append_json(settings.report_file, records)
        else:
            stream = sys.stderr
            if stream is not None and not stream.closed:
                stream.write(format_report(records) + "\n")
                stream.flush()
    except Exception as exc:  # noqa: BLE001  (a report must never turn a clean exit into a failure)
        try:
            cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
            sys.stderr.write(f"fl_patch: could not write the exit report: {cause}\n")
        except Exception:  # noqa: BLE001
            pass


# An argument that names a secret (``--api-key X``, ``--token=X``, ``password=X``).
# Whole words of the option's name, so --tokenizer-type or --max-tokens stay as they are.
_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "pwd", "credential", "credentials", "auth"}
)


def _names_secret(word: str) -> bool:
    name = word.lstrip("-").split("=", 1)[0].lower().replace("-", "_")
    return any(part in _SECRET_WORDS for part in name.split("_"))


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with the values of secret-looking options replaced by ``<redacted>``."""
    out: list[str] = []
    redact_next = False
    for word in argv:
        if redact_next:
            out.append("<redacted>")
            redact_next = False
        elif "=" in word and _names_secret(word):
            out.append(word.split("=", 1)[0] + "=<redacted>")
        elif word.startswith("-") and _names_secret(word):
            out.append(word)
            redact_next = True
        else:
            out.append(word)
    return out


def _append_json(path: str, records: list[PatchRecord]) -> None:
    entry = {
        "pid": os.getpid(),
        "rank": os.environ.get("RANK"),
        "argv": redact_argv([str(a) for a in getattr(sys, "argv", [])]),
        "records": [r.as_dict() for r in records],
    }
    data = (json.dumps(entry) + "\n").encode()
    # One write on an O_APPEND descriptor: concurrent ranks never interleave within a line.
    # 0600: the report names the job's code and arguments. O_NOFOLLOW: a symlink planted at
    # the path (in a shared /tmp, say) is refused instead of writing through it.
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise OSError(
                exc.errno, f"{path} is a symbolic link; fl_patch does not write its report through a link"
            ) from None
        raise
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
