"""The command line: run a program with fl_patch active, or see what fl_patch would patch.

::

    python -m fl_patch [options] script.py [args...]
    python -m fl_patch [options] -m package.module [args...]
    python -m fl_patch [options] -c "code" [args...]
    python -m fl_patch [options] --list [--json]
    python -m fl_patch [options] --check [--json]

(``fl-patch`` is the same command.) Options come before the program; everything
after the script, ``-m module`` or ``-c code`` belongs to the program, untouched.
Each option sets an environment variable of fl_patch, so every child process
inherits it. See ``fl_patch.activation.launch`` for how the program is run.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from fl_patch.activation.settings import ENV

if TYPE_CHECKING:
    from fl_patch.introspection.check import Listed

__all__ = ["main"]

USAGE = """\
usage: python -m fl_patch [options] script.py [args...]
       python -m fl_patch [options] -m module [args...]
       python -m fl_patch [options] -c code [args...]
       python -m fl_patch [options] --list | --check [--json]

Run a Python program with fl_patch's import-time patches active in it and in every
Python process it starts (torchrun workers, multiprocessing children, subprocesses).

options (each sets the environment variable shown, which children inherit):
  --vendor V[,V...]     vendor priority, e.g. musa or flaggems,cuda      MG_FL_PREFER
  --registry MOD        registry module to import (repeatable)          FL_PATCH_REGISTRY
  --packs P[,P]|all|none  shipped packs to enable (default: all)        FL_PATCH_PACKS
  --disable T[,T]       targets or method keys not to patch (repeatable) FL_PATCH_DISABLE
  --strict              any patch problem is an error                   FL_PATCH_STRICT=1
  --report              report at exit: applied, calls, never triggered FL_PATCH_REPORT=1
  --report-file PATH    append that report as JSON lines to PATH        FL_PATCH_REPORT_FILE
  --no-entry-points     ignore installed fl_patch.registries entry points FL_PATCH_ENTRY_POINTS=0
  --no-flagscale        ignore a FlagScale plugin tree                  FL_PATCH_FLAGSCALE=0
  --no-cuda-on-cpu      no CUDA-on-CPU transfer on a machine without GPU FL_PATCH_CUDA_ON_CPU=0
  --no-child-warnings   do not watch for children fl_patch cannot reach  FL_PATCH_CHILDREN=0
  --in-process          run the program in this interpreter (runpy), not a fresh one

commands:
  --list                every registration: target, method key, vendors, chosen vendor, impl, status
                        (imports no megatron module)
  --check               import every target module and impl; check each impl can stand in for its
                        target in the installed Megatron; exit status 1 on any problem
  --json                --list / --check output as JSON
  --version, -h/--help
"""


class UsageError(Exception):
    pass


@dataclass
class Options:
    env: dict[str, str] = field(default_factory=dict)
    append: dict[str, list[str]] = field(default_factory=dict)
    command: str | None = None  # "list", "check", "help", "version"
    json: bool = False
    in_process: bool = False
    program: list[str] = field(default_factory=list)


def _check_vendors(value: str) -> str:
    from fl_patch.core.paths import parse_vendor

    try:
        return ",".join(parse_vendor(v) for v in value.split(",") if v.strip())
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_names(value: str) -> str:
    for name in (v.strip() for v in value.split(",")):
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise UsageError(f"not a dotted module name: {name!r}")
    return value


def _set(variable: str, convert: Callable[[str], str] = str) -> Callable[[Options, str], None]:
    def apply(options: Options, value: str) -> None:
        options.env[variable] = convert(value)

    return apply


def _add(variable: str, convert: Callable[[str], str] = str) -> Callable[[Options, str], None]:
    def apply(options: Options, value: str) -> None:
        options.append.setdefault(variable, []).append(convert(value))

    return apply


def _report_file(options: Options, value: str) -> None:
    options.env[ENV.REPORT_FILE] = os.path.abspath(value)  # children may chdir


def _command(name: str) -> Callable[[Options], None]:
    def apply(options: Options) -> None:
        if options.command not in (None, name):
            raise UsageError(f"--{name} cannot be combined with --{options.command}")
        options.command = name

    return apply


_WITH_VALUE: dict[str, Callable[[Options, str], None]] = {
    "--vendor": _set(ENV.PREFER, _check_vendors),
    "--registry": _add(ENV.REGISTRY, _check_names),
    "--packs": _set(ENV.PACKS),
    "--disable": _add(ENV.DISABLE),
    "--report-file": _report_file,
}
_FLAGS: dict[str, Callable[[Options], None]] = {
    "--strict": lambda o: o.env.__setitem__(ENV.STRICT, "1"),
    "--report": lambda o: o.env.__setitem__(ENV.REPORT, "1"),
    "--no-entry-points": lambda o: o.env.__setitem__(ENV.ENTRY_POINTS, "0"),
    "--no-flagscale": lambda o: o.env.__setitem__(ENV.FLAGSCALE, "0"),
    "--no-cuda-on-cpu": lambda o: o.env.__setitem__(ENV.CUDA_ON_CPU, "0"),
    "--no-child-warnings": lambda o: o.env.__setitem__(ENV.CHILDREN, "0"),
    "--in-process": lambda o: setattr(o, "in_process", True),
    "--json": lambda o: setattr(o, "json", True),
    "--list": _command("list"),
    "--check": _command("check"),
    "--version": _command("version"),
    "--help": _command("help"),
    "-h": _command("help"),
}


def parse(argv: Sequence[str]) -> Options:
    """Options up to the program; the program's own arguments are never looked at."""
    options = Options()
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            options.program = list(argv[i + 1 :])
            break
        if word in ("-m", "-c"):
            if i + 1 >= len(argv):
                raise UsageError(f"{word} needs an argument")
            options.program = list(argv[i:])
            break
        if word.startswith("-m") or word.startswith("-c"):  # -mpkg.mod, as python accepts
            options.program = [word[:2], word[2:], *argv[i + 1 :]]
            break
        if not word.startswith("-") or word == "-":
            options.program = list(argv[i:])
            break
        name, eq, value = word.partition("=")
        if name in _WITH_VALUE:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"{name} needs a value")
                i += 1
                value = argv[i]
            _WITH_VALUE[name](options, value)
        elif word in _FLAGS:
            _FLAGS[word](options)
        else:
            raise UsageError(f"unknown option {word!r} (options go before the program; see --help)")
        i += 1
    if options.command in ("list", "check") and options.program:
        raise UsageError(f"--{options.command} takes no program")
    if options.command is None and not options.program:
        raise UsageError("no program to run")
    return options


def _apply_environment(options: Options) -> None:
    os.environ.update(options.env)
    for variable, values in options.append.items():
        existing = [v for v in os.environ.get(variable, "").split(",") if v.strip()]
        added = [v.strip() for value in values for v in value.split(",") if v.strip()]
        os.environ[variable] = ",".join(dict.fromkeys(existing + added))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m fl_patch`` and ``fl-patch``; returns the exit status."""
    try:
        options = parse(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        sys.stderr.write(f"fl_patch: {exc}\n\n{USAGE}")
        return 2
    if options.command == "help":
        sys.stdout.write(USAGE)
        return 0
    if options.command == "version":
        from fl_patch import __version__

        sys.stdout.write(f"fl_patch {__version__}\n")
        return 0
    _apply_environment(options)
    if options.command in ("list", "check"):
        with _stdout_for_json_only(options.json) as out:
            return _list(options.json, out) if options.command == "list" else _check(options.json, out)
    from fl_patch.activation.launch import exec_program

    return exec_program(options.program, in_process=options.in_process)


@contextlib.contextmanager
def _stdout_for_json_only(as_json: bool) -> Iterator[TextIO]:
    """The stream to write the answer to; with ``--json``, all else that writes to stdout goes to stderr.

    Plugins print while they load (FlagScale's platform registry does), and a C extension may
    write to file descriptor 1 itself: both are sent to stderr, at the Python and at the
    descriptor level, so that stdout carries the JSON document and nothing else.
    """
    if not as_json:
        yield sys.stdout
        return
    sys.stdout.flush()
    saved_fd = os.dup(1)
    answer = os.fdopen(os.dup(saved_fd), "w", encoding="utf-8")
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield answer
    finally:
        sys.stdout.flush()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        answer.flush()
        answer.close()


def _list(as_json: bool, out: TextIO) -> int:
    from fl_patch.introspection.check import list_registrations

    listed = list_registrations()
    if as_json:
        out.write(json.dumps({"registrations": [entry.as_dict() for entry in listed]}, indent=2) + "\n")
        return 0
    out.write(_listing(listed))
    return 0


def _listing(listed: list[Listed]) -> str:
    """Each target on a line of its own, then one indented line per vendor registered for it.

    Targets and impls are long dotted paths: one row per registration with every field
    made lines of 300 columns. ``*`` marks the vendor that runs (or would run) here.
    """
    vendor_width = max((len(e.vendor) for e in listed), default=0)
    status_width = max((len(e.status) for e in listed), default=0)
    lines: list[str] = []
    previous = None
    for e in listed:
        if e.target != previous:
            lines.append(e.target)
            previous = e.target
        mark = "*" if e.vendor == e.chosen_vendor else " "
        source = "" if e.source.startswith("fl_patch.impls.") else f"  (from {e.source})"  # a pack's is its impl's
        lines.append(f"  {mark} {e.vendor:<{vendor_width}}  {e.status:<{status_width}}  {e.impl}{source}")
    targets = len({e.target for e in listed})
    lines.append(f"{len(listed)} registration(s) for {targets} target(s); * marks the vendor chosen on this machine")
    return "\n".join(lines) + "\n"


def _check(as_json: bool, out: TextIO) -> int:
    from fl_patch.core.records import format_table
    from fl_patch.introspection.check import check

    report = check()
    if as_json:
        out.write(json.dumps(report.as_dict(), indent=2) + "\n")
        return 1 if report.failed else 0
    out.write(f"megatron-core {report.megatron_core or 'not installed'}; vendors here: {', '.join(report.vendors)}\n")
    rows = [
        _CheckRow(
            level=r.level,
            target=r.target,
            vendor=r.vendor + (" (chosen)" if r.vendor == r.chosen_vendor else ""),
            kind=r.kind or "-",
            target_found="yes" if r.target_found else "NO",
            impl_loads="yes" if r.impl_loaded else ("skipped" if r.skipped else "NO"),
            signature=r.signature,
        )
        for r in report.results
    ]
    columns = ("level", "target", "vendor", "kind", "target_found", "impl_loads", "signature")
    out.write(format_table(rows, columns) + "\n")  # type: ignore[arg-type]
    for r in report.results:
        notes = [f"{f.level}: {f.message}" for f in r.findings] + ([f"skipped: {r.skipped}"] if r.skipped else [])
        if notes:
            out.write(f"\n{r.target} [{r.vendor}] -> {r.impl}\n")
            out.writelines(f"  {note}\n" for note in notes)
    for problem in report.source_problems:
        out.write(f"\nerror: {problem}\n")
    for message in report.messages:
        out.write(f"\nwarning: {message}\n")
    if report.activation is not None:
        state = "ok" if report.activation.get("ok") else "error"
        out.write(f"\nactivation: {state}: {report.activation.get('detail')}\n")
    errors = sum(r.level == "error" for r in report.results) + len(report.source_problems)
    out.write(f"\n{len(report.results)} registration(s) checked: {errors} error(s)\n")
    return 1 if report.failed else 0


@dataclass
class _CheckRow:
    level: str
    target: str
    vendor: str
    kind: str
    target_found: str
    impl_loads: str
    signature: str
