"""Report mode (``--report``, ``FL_PATCH_REPORT=1``): count calls, say at exit what happened.

Imported only in report mode. ``enable()`` adds ``make_counter`` to the engine's wraps, so
every function or method replacement is wrapped, before it is installed, in a
counting function; at interpreter exit the process prints (or appends to
``FL_PATCH_REPORT_FILE``) what was applied, how often each patched target was
called, what never triggered and what failed.

Why a plain function and not a wrapt proxy: ``torch.compile`` inlines a proxy's
``__code__`` (the impl's, or worse, the original's) and never calls the wrapper, and
proxies do not pickle. The engine gives the counting function the face it gives any
replacement (``core.patch``): named where it is installed (pickle finds it there),
``__wrapped__`` the upstream original.

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

A counted call costs one more Python call than an uncounted one; report mode is for
diagnosis runs.
"""

from __future__ import annotations

import atexit
import errno
import inspect
import itertools
import json
import os
import re
import select
import stat
import sys
import threading
import time
import types
from collections.abc import Sequence
from dataclasses import replace

from fl_patch.core.records import PatchRecord, Status
from fl_patch.core.resolve import Kind
from fl_patch.host.compiling import is_compiling_function
from fl_patch.reporting.layout import (
    NOT_IN_A_PACK,
    counts_text,
    matches,
    owner_of,
    pack_lines,
    pack_order,
    terminal_width,
    wrap,
)
from fl_patch.runtime import RUNTIME

__all__ = [
    "CallCounts",
    "counted_records",
    "enable",
    "format_report",
    "make_counter",
    "names_secret",
    "record_dict",
    "redact_argv",
    "report_now",
    "select_records",
]


class CallCounts:
    """One counter per target, kept across re-installs and reloads: the process's totals."""

    def __init__(self) -> None:
        self.counters: dict[str, itertools.count[int]] = {}
        self.lock = threading.Lock()
        self.atexit_registered = False
        self.reported = False  # this process's report was written (once: at exit, or by strict's stop)


def _counts() -> CallCounts:
    if RUNTIME.call_counts is None:
        RUNTIME.call_counts = CallCounts()
    return RUNTIME.call_counts


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


def make_counter(target: str, function: types.FunctionType, upstream: object, kind: Kind) -> types.FunctionType:
    """The engine's wrap in report mode (``core.patch.Wrap``): ``function`` counted, or itself.

    Only plain functions and methods are counted (see the module doc). The engine gives the
    returned function the upstream's face (``__wrapped__`` = upstream, named where installed), as
    it does without report mode: a diagnostic mode never changes what callers see.
    """
    if kind not in (Kind.FUNCTION, Kind.METHOD):
        return function
    if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
        return function  # a wrapper would change what inspect says the function is
    counter = _counter_for(target)
    is_compiling = is_compiling_function()
    impl = function
    tick = counter.__next__

    if inspect.iscoroutinefunction(impl):

        async def counted_async(*args: object, **kwargs: object) -> object:
            if not is_compiling():
                tick()
            return await impl(*args, **kwargs)

        return counted_async  # type: ignore[return-value]  # a def: a FunctionType

    def counted(*args: object, **kwargs: object) -> object:
        if not is_compiling():
            tick()
        return impl(*args, **kwargs)

    return counted  # type: ignore[return-value]  # a def: a FunctionType


def enable() -> None:
    """Count calls through every function patch the engine installs; report at exit."""
    RUNTIME.engine.add_wrap(make_counter)
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
    from fl_patch.host.ranks import process_rank  # standard library only: RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK...

    label = f"pid {os.getpid()}"
    rank = process_rank().label()
    if rank:
        label += f", {rank}"
    argv = getattr(sys, "argv", None) or ["?"]
    return f"{label}, {os.path.basename(str(argv[0])) or argv[0]}"


def _record_pack(record: PatchRecord) -> str:
    return owner_of(record.source)


def _status_text(record: PatchRecord) -> str:
    return "never triggered" if record.status is Status.WAITING else record.status.value


def _rank(record: PatchRecord) -> int:
    """Problems first, then what runs, then the rest."""
    if record.status.is_problem:
        return 0
    return 1 if record.status is Status.APPLIED else 2


def select_records(records: list[PatchRecord], only: Sequence[tuple[str, str]]) -> list[PatchRecord]:
    """The records that match every ``--only`` (key, value): vendor, source, status, target, pack (as ``--list``)."""
    for key, wanted in only:
        records = [r for r in records if matches(key, wanted, _field(r, key))]
    return records


def _field(record: PatchRecord, key: str) -> str:
    if key == "pack":
        return _record_pack(record)
    if key == "status":
        return record.status.value
    return str(getattr(record, key, "") or "")


def format_report(
    records: list[PatchRecord],
    *,
    width: int | None = None,
    show_all: bool = False,
    only: Sequence[tuple[str, str]] = (),
) -> str:
    """The text report, plugin first: a summary line; the user's rows, every one of them, problems first; a line
    per shipped pack (``show_all``: their rows too); ``only``: just the rows that match, whoever registered them."""
    width = width or terminal_width()
    chosen = [r for r in records if r.vendor == r.chosen_vendor or r.status.is_problem]
    applied = [r for r in chosen if r.status is Status.APPLIED]
    waiting = [r for r in chosen if r.status is Status.WAITING]
    problems = [r for r in records if r.status.is_problem]
    idle = [r for r in applied if r.calls == 0]
    label = _process_label()
    if not records:
        return f"fl_patch report ({label}): no registered target was imported in this process"
    head = (
        f"fl_patch report ({label}): {len(applied)} applied, {len(waiting)} never triggered, "
        f"{len(problems)} problem(s), {len(idle)} applied but never called"
    )
    if not applied and not problems:
        return head + " (no registered target was imported in this process)"
    lines = wrap(head, width, "", "  ")
    if only:
        kept = select_records(records, only)
        shown = ", ".join(f"{key}={value}" for key, value in only)
        lines += wrap(f"rows matching --only {shown}: {len(kept)}", width)
        lines += _rows(sorted(kept, key=_rank), width)
        return "\n".join(lines)
    yours = [r for r in records if _record_pack(r) == NOT_IN_A_PACK]
    packs: dict[str, list[PatchRecord]] = {}
    for record in records:
        if _record_pack(record) != NOT_IN_A_PACK:
            packs.setdefault(_record_pack(record), []).append(record)
    if yours:
        sources = sorted({r.source for r in yours})
        lines += wrap(f"yours, from {', '.join(sources[:3])}: {counts_text(_status_text(r) for r in yours)}", width)
        lines += _rows(sorted(yours, key=_rank), width)
    if packs:
        if show_all:
            for name in sorted(packs, key=pack_order):
                rows = packs[name]
                lines += wrap(f"pack {name}: {counts_text(_status_text(r) for r in rows)}", width)
                lines += _rows(sorted(rows, key=_rank), width)
        else:
            lines += wrap(
                "shipped packs, one line each (--report --all lists their rows, --only pack=NAME one's):", width
            )
            lines += pack_lines({name: map(_status_text, rows) for name, rows in packs.items()}, width)
            failing = [r for rows in packs.values() for r in rows if r.status.is_problem]
            if failing:
                lines += wrap("problems in shipped packs:", width)
                lines += _rows(failing, width)
    return "\n".join(lines)


def _rows(records: list[PatchRecord], width: int) -> list[str]:
    """One line per record (status, calls, vendor, target), the impl and the detail wrapped under it.

    A table with a column each for target, impl and detail ran past 200 columns.
    """
    if not records:
        return []
    status_width = max(len("status"), *(len(_status_text(r)) for r in records))
    calls_width = max(len("calls"), *(len(_calls(r)) for r in records))
    vendor_width = max(len("vendor"), *(len(r.chosen_vendor or r.vendor or "-") for r in records))
    lines = [f"{'status':<{status_width}}  {'calls':>{calls_width}}  {'vendor':<{vendor_width}}  target / impl"]
    indent = " " * (status_width + calls_width + vendor_width + 6)
    for r in records:
        vendor = r.vendor if r.status is Status.OTHER_VENDOR else (r.chosen_vendor or "-")
        head = f"{_status_text(r):<{status_width}}  {_calls(r):>{calls_width}}  {vendor:<{vendor_width}}  "
        lines += wrap(r.target, width, head, indent)
        detail = f"  ({r.detail})" if r.detail and r.status is not Status.WAITING else ""
        lines += wrap(f"-> {r.impl}{detail}", width, indent, indent + "   ")
    return lines


def record_dict(record: PatchRecord) -> dict[str, object]:
    """A record as the report file (and the job's merged report) keeps it: with the pack it belongs to."""
    return {**record.as_dict(), "pack": _record_pack(record)}


def _calls(record: PatchRecord) -> str:
    return "-" if record.calls is None else str(record.calls)


def report_now() -> None:
    """Write this process's exit report now, unless it was (strict mode's stop calls this before ``os._exit``)."""
    if RUNTIME.call_counts is not None and RUNTIME.call_counts.atexit_registered:
        _report_at_exit()


def _report_at_exit() -> None:
    if not RUNTIME.installed and RUNTIME.call_counts is None:
        return
    counts = _counts()
    with counts.lock:
        if counts.reported:
            return
        counts.reported = True
    engine = RUNTIME.engine
    try:
        settings = engine.settings
        # detect=False: never import torch during shutdown just to name the platform.
        records = counted_records(engine.records(detect=False))
        if settings.report_file:
            _append_json(settings.report_file, records)
        elif RUNTIME.report_sink is not None and RUNTIME.report_sink(records):
            pass  # a rank of a job: rank 0 prints the job's merged report (fl_patch.job.report)
        elif _idle_in_a_job(records):
            pass  # torchrun's agent, or a rank ended before it imported a patched module: the job's report says what ran
        else:
            stream = sys.stderr
            if stream is not None and not stream.closed:
                text = format_report(records, show_all=settings.report_all, only=settings.report_only)
                stream.write(text + "\n")
                stream.flush()
    except Exception as exc:  # noqa: BLE001  (a report must never turn a clean exit into a failure)
        try:
            cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
            sys.stderr.write(f"fl_patch: could not write the exit report: {cause}\n")
        except Exception:  # noqa: BLE001
            pass


def _idle_in_a_job(records: list[PatchRecord]) -> bool:
    """A process of a job that applied nothing and has no problem, whose own "0 applied" line would only mislead.

    torchrun's agent, which launches the ranks and is none of them; and a rank other than rank 0 that ended before
    it imported a patched module (it crashed, or torchrun stopped it when another rank failed): it joined no process
    group, so its records are in no merged report, and that report (of the job, or of its restarted attempt) already
    names the ranks that did not report. Rank 0 still prints its line: in a job where no rank imports a patched
    module, that one line is the job's report.
    """
    from fl_patch.host.ranks import is_elastic_agent, process_rank  # standard library only

    if any(r.status is Status.APPLIED or r.status.is_problem for r in records):
        return False
    if is_elastic_agent():
        return True
    rank = process_rank()
    return rank.rank is not None and rank.rank != 0 and (rank.world or 0) > 1


# Redaction of the command line kept in the report (the JSON goes to shared storage, CI logs).
# By the *name* a value is given under, in every syntax a command line carries one:
# ``--name value``, ``--name=value``, ``name=value`` (and ``NAME=value``, query strings,
# ``a=1,token=x`` lists), ``"name": "value"`` / ``'name': 'value'`` (JSON or a dict's repr,
# inside any argument), ``name: value``; and, by shape, URL userinfo
# (``https://user:token@host``), ``Bearer X`` and a few well-known token prefixes. A name is
# secret when one of its words (split at ``-``, ``_``, ``.``, camelCase) is a secret word,
# so ``--tokenizer-type`` and ``--max-tokens`` stay as they are. Short options: only ``-p``,
# which is the password by convention (mysql, sshpass, many tools' ``-p/--password``);
# where it means a port or a plugin (``ssh -p 22``, ``pytest -p xdist``) the value is
# redacted too: hiding a port number costs nothing, writing a password down costs a lot.
_SECRET_WORDS = frozenset(
    {
        "key", "apikey", "token", "secret", "password", "passwd", "pwd", "passphrase", "pass", "credential",
        "credentials", "auth", "authorization", "bearer", "cookie", "privatekey", "accesskey", "sas",
    }
)  # fmt: skip
_PASSWORD_SHORT_OPTIONS = frozenset({"-p"})
REDACTED = "<redacted>"

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s?#]+)@")
_QUOTED_PAIR = re.compile(
    r"""(?P<q>["'])(?P<name>[^"'\\]{1,200})(?P=q)\s*:\s*"""
    r"""(?:(?P<vq>["'])(?P<value>(?:\\.|(?!(?P=vq)).)*)(?P=vq)|(?P<bare>[^\s,}\]{\["']+))"""
)
# A name and its separator only: the value is not consumed by the search, so a secret named
# inside another's value (``--url=https://h/p?access_token=X``) is found too.
_NAME_SEP = re.compile(r"(?<![\w.-])(?P<name>[A-Za-z_][\w.-]*)\s*[=:]\s*")
_VALUE = re.compile(r"[^\s&,;}\]\"']+")
_BEARER = re.compile(r"(?i)\b(?P<scheme>bearer|basic|token)(?P<sep>\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})")
_TOKEN_SHAPES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|glpat-[A-Za-z0-9_-]{20,})"
)


def names_secret(name: str) -> bool:
    """Whether a value given under ``name`` (an option, a key, a variable) is to be redacted."""
    name = name.strip().strip("\"'").lstrip("-")
    parts = [part.lower() for part in _WORD_SPLIT.split(name) if part]
    return bool(parts) and (any(part in _SECRET_WORDS for part in parts) or "".join(parts) in _SECRET_WORDS)


def _redact_text(text: str) -> str:
    """Secrets inside one argument: URL userinfo, quoted pairs, assignments, bearer tokens, token shapes."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)

    def quoted(m: re.Match[str]) -> str:
        if not names_secret(m["name"]):
            return m[0]
        head = m[0][: m.start("vq" if m["vq"] else "bare") - m.start()]
        return f"{head}{m['vq']}{REDACTED}{m['vq']}" if m["vq"] else f"{head}{REDACTED}"

    text = _QUOTED_PAIR.sub(quoted, text)
    text = _BEARER.sub(lambda m: f"{m['scheme']}{m['sep']}{REDACTED}", text)
    text = _redact_assignments(text)
    return _TOKEN_SHAPES.sub(REDACTED, text)


def _redact_assignments(text: str) -> str:
    """``name=value`` and ``name: value`` with a secret name, wherever they are inside ``text``."""
    pieces, done = [], 0
    for match in _NAME_SEP.finditer(text):
        if match.start() < done or not names_secret(match["name"]):
            continue
        value = _VALUE.match(text, match.end())
        if value is None or value[0] == REDACTED:
            continue
        pieces += [text[done : match.end()], REDACTED]
        done = value.end()
    return "".join(pieces) + text[done:]


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with every secret-looking value replaced by ``<redacted>`` (see above for what is)."""
    out: list[str] = []
    redact_next = False
    for word in argv:
        if redact_next:
            out.append(REDACTED)
            redact_next = False
            continue
        option = word.startswith("-") and len(word) > 1 and not word[1:2].isdigit()  # -0.5 is a value
        if option and not word.startswith("--") and word[:2] in _PASSWORD_SHORT_OPTIONS and len(word) > 2:
            # -pSECRET (mysql's form), asked first: an attached value may itself look like a secret's name
            # (-p00000KEY), which the next branch would keep as an option and redact the word after instead
            out.append(word[:2] + REDACTED)
        elif option and "=" not in word and (names_secret(word) or word in _PASSWORD_SHORT_OPTIONS):
            out.append(word)
            redact_next = True  # --token X, -p X
        elif option and "=" in word and names_secret(word.split("=", 1)[0]):
            out.append(word.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(_redact_text(word))
    return out


def _append_json(path: str, records: list[PatchRecord]) -> None:
    from fl_patch.host.ranks import process_rank

    rank = process_rank()
    entry = {
        "pid": os.getpid(),
        "rank": None if rank.rank is None else str(rank.rank),
        "rank_source": rank.source,
        "argv": redact_argv([str(a) for a in getattr(sys, "argv", [])]),
        "records": [record_dict(r) for r in records],
    }
    data = (json.dumps(entry) + "\n").encode()
    fd, ours = _open_report(path)
    try:
        _write_all(fd, data, path)
    finally:
        if ours:
            os.close(fd)


# A process's own descriptors by name: what ``>> /dev/stderr`` in a shell writes to.
_OWN_DESCRIPTOR = re.compile(r"^/(?:dev/fd|proc/self/fd|proc/(?P<pid>\d+)/fd)/(?P<fd>\d+)$")
_STD_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}

# The longest the report may keep a finished program from exiting when the reader of a
# pipe (or a terminal) does not keep up: then the report is given up, said once.
WRITE_DEADLINE_S = 5.0


def _own_descriptor(path: str) -> int | None:
    """The descriptor ``path`` names when it is one of this process's own (``/dev/stderr``, ``/dev/fd/N``)."""
    path = os.path.normpath(path)
    if path in _STD_NAMES:
        return _STD_NAMES[path]
    match = _OWN_DESCRIPTOR.match(path)
    if match is None or (match["pid"] is not None and int(match["pid"]) != os.getpid()):
        return None
    return int(match["fd"])


def _open_report(path: str) -> tuple[int, bool]:
    """A descriptor to append the report to, and whether it is ours to close.

    Accepts what a shell's ``>>`` accepts, without ever blocking the exit or writing through
    a planted link: a regular file (created 0600: the report names the job's code and
    arguments); a character device, a FIFO or socket, also behind a symbolic link
    (``/dev/tty``, a named pipe ``tee`` reads); the process's own descriptors (``/dev/stderr``,
    ``/dev/fd/N``: written to directly). Refused: a symbolic link to a regular file (or to
    nothing, where it would create one): a link planted in a shared directory would make the
    job append to whatever it points at. Opened ``O_NONBLOCK``: a FIFO no process reads is
    skipped with one message (``ENXIO``), not waited on at exit forever.
    """
    own = _own_descriptor(path)
    if own is not None:
        for stream in (sys.stdout, sys.stderr):  # what the program wrote comes first, as in a shell
            try:
                if stream is not None and not stream.closed:
                    stream.flush()
            except (OSError, ValueError):
                pass
        try:
            os.fstat(own)
        except OSError as exc:
            raise OSError(exc.errno, f"{path}: descriptor {own} is not open in this process") from None
        return own, False
    base = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, base | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise _no_reader(path) from None
        if not (exc.errno == errno.ELOOP or os.path.islink(path)):
            raise
        fd = _open_through_link(path, base)
    return fd, True


def _open_through_link(path: str, flags: int) -> int:
    """``path`` is a symbolic link: open what it points at only if that is no regular file."""
    refused = OSError(
        errno.ELOOP, f"{path} is a symbolic link to a file; fl_patch does not write its report through a link"
    )
    try:
        fd = os.open(path, flags)  # no O_CREAT: through a link, nothing is created
    except FileNotFoundError:
        raise refused from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise _no_reader(path) from None
        raise
    # Checked on the open descriptor, not the name: the link cannot be switched in between.
    if stat.S_ISREG(os.fstat(fd).st_mode) or stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise refused
    return fd


def _no_reader(path: str) -> OSError:
    return OSError(errno.ENXIO, f"{path} is a FIFO no process is reading; the report is skipped, not waited on")


def _write_all(fd: int, data: bytes, path: str) -> None:
    """Write ``data`` (one ``write`` where it fits: concurrent ranks' lines never interleave), never for long."""
    deadline = time.monotonic() + WRITE_DEADLINE_S
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise OSError(
                    errno.EAGAIN,
                    f"{path}: its reader did not take the report within {WRITE_DEADLINE_S:g} s; the rest is skipped",
                ) from None
            select.select([], [fd], [], min(left, 0.1))
            continue
        except BrokenPipeError:
            raise OSError(errno.EPIPE, f"{path}: its reader went away; the report is skipped") from None
        view = view[written:]
