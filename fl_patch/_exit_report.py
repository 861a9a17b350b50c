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
import functools
import inspect
import itertools
import json
import os
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ._report import PatchRecord, Status, format_table

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["counted_records", "enable", "format_report", "make_counter"]

_counters: dict[str, itertools.count[int]] = {}
_counters_lock = threading.Lock()
_engine: Engine | None = None
_registered_atexit = False


def _never_compiling() -> bool:
    return False


def _is_compiling_function() -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` if torch is loaded (it always is under megatron)."""
    torch = sys.modules.get("torch")
    compiler = getattr(torch, "compiler", None)
    is_compiling = getattr(compiler, "is_compiling", None)
    return is_compiling if callable(is_compiling) else _never_compiling


def _counter_for(target: str) -> itertools.count[int]:
    # One counter per target, kept across re-installs and reloads, so the total is the
    # process's total. next() on itertools.count is atomic under the GIL: no lock per call.
    with _counters_lock:
        counter = _counters.get(target)
        if counter is None:
            counter = _counters[target] = itertools.count(1)
        return counter


def calls(target: str) -> int | None:
    """How many calls were counted through ``target``'s patch, or None if none was counted."""
    counter = _counters.get(target)
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
    return wrapper


def enable(engine: Engine) -> None:
    """Count calls through every function patch this engine installs; report at exit."""
    global _engine, _registered_atexit
    _engine = engine
    engine.call_counter = make_counter
    if not _registered_atexit:
        _registered_atexit = True
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
    columns = ("status", "target", "chosen_vendor", "impl", "calls", "detail")
    lines = [head, format_table(applied + problems, columns)]
    if waiting:
        lines.append("never triggered (their modules were not imported): " + ", ".join(r.target for r in waiting))
    return "\n".join(lines)


def _report_at_exit() -> None:
    engine = _engine
    if engine is None:
        return
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
            sys.stderr.write(f"fl_patch: could not write the exit report: {exc!r}\n")
        except Exception:  # noqa: BLE001
            pass


def _append_json(path: str, records: list[PatchRecord]) -> None:
    entry = {
        "pid": os.getpid(),
        "rank": os.environ.get("RANK"),
        "argv": list(getattr(sys, "argv", [])),
        "records": [r.as_dict() for r in records],
    }
    data = (json.dumps(entry) + "\n").encode()
    # One write on an O_APPEND descriptor: concurrent ranks never interleave within a line.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
