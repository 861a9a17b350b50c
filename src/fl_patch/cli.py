"""The command line: run a program with fl_patch active, or see what fl_patch would patch.

::

    fl-patch [options] script.py [args...]      (or python -m fl_patch ...)
    fl-patch [options] -m package.module [args...]
    fl-patch [options] -c "code" [args...]
    fl-patch [options] --list | --check [--json] [--only KEY=VALUE]
    fl-patch [options] compare --baseline upstream|VENDOR [...] -- script.py [args...]
    fl-patch --version | --print-pythonpath | --help

Options come before the program; everything after the script, ``-m module`` or
``-c code`` belongs to the program, untouched. Each option sets an environment
variable of fl_patch, so every child process inherits it. Options, variables and
help text come from one table, ``fl_patch.config.options``; parsing is argparse's, on the
words before the program (argparse cannot tell where a program's own arguments
start: ``fl-patch --strict train.py --strict`` must leave the second ``--strict`` to
the program, so the split is made first, with the same table). See
``fl_patch.activation.launch`` for how the program is run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn, TextIO

from fl_patch.config.options import COMMANDS, OPTIONS, Option
from fl_patch.config.settings import ENV, FILTER_KEYS, pin_report_file, read_list, switch_value
from fl_patch.config.suggest import did_you_mean

if TYPE_CHECKING:
    from fl_patch.diagnostics.check import Listed

__all__ = ["main", "parse"]

# The widest the help gets (a terminal may be narrower: it wraps to it).
MAX_WIDTH = 120


class UsageError(Exception):
    pass


@dataclass
class Options:
    env: dict[str, str] = field(default_factory=dict)
    append: dict[str, list[str]] = field(default_factory=dict)
    command: str | None = None  # "list", "check", "help", "version", "print-pythonpath"
    json: bool = False
    in_process: bool = False
    only: list[tuple[str, str]] = field(default_factory=list)  # --list/--check/--report filters
    all: bool = False  # --list/--check/--report: the packs' rows too
    why: bool = False  # --list: each registration's PatchDoc
    against: list[str] = field(default_factory=list)  # --check --against: megatron-cores not installed
    offline: bool = False
    program: list[str] = field(default_factory=list)


def prog_name(argv0: str | None = None) -> str:
    """The command as the user typed it: ``fl-patch``, or ``python -m fl_patch``."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    base = os.path.basename(argv0)
    if base in ("__main__.py", "-m", "") or base.startswith("-"):
        return "python -m fl_patch"
    return base


def _usage(prog: str) -> str:
    return f"usage: {prog} [options] (script.py | -m module | -c code) [args...] | --list | --check | --help"


# ------------------------------------------------------------------------------------ parsing
def _rows() -> list[Option]:
    return [row for row in (*OPTIONS, *COMMANDS) if row.flags]


def _by_flag() -> dict[str, Option]:
    return {flag: row for row in _rows() for flag in row.flags}


def split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``argv`` cut into fl_patch's options and the program (with its arguments, untouched)."""
    rows = _by_flag()
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return list(argv[:i]), list(argv[i + 1 :])
        if word in ("-m", "-c"):
            if i + 1 >= len(argv):
                raise UsageError(f"{word} needs an argument")
            return list(argv[:i]), list(argv[i:])
        if word.startswith(("-m", "-c")) and not word.startswith("--"):  # -mpkg.mod, as python accepts
            return list(argv[:i]), [word[:2], word[2:], *argv[i + 1 :]]
        if not word.startswith("-") or word == "-":
            return list(argv[:i]), list(argv[i:])
        name, eq, _ = word.partition("=")
        row = rows.get(name)
        if row is None:
            hint = did_you_mean(name, rows, cutoff=0.7) or " (options go before the program; see --help)"
            raise UsageError(f"unknown option {word!r}{hint}")
        if row.kind == "optional" and not eq:
            # --compare [N]: the next word is N when it starts like a number (then it must be one)
            if i + 1 < len(argv) and _LOOKS_NUMERIC.match(argv[i + 1]):
                i += 1
        elif row.takes_value and not eq:
            if i + 1 >= len(argv):
                raise UsageError(f"{name} needs a value")
            i += 1
        elif eq and not row.takes_value and row.kind not in ("switch", "optional"):
            raise UsageError(f"{name} takes no value")
        i += 1
    return list(argv), []


# A word after ``--compare`` that starts like a number is its N (``5``, and ``2.5`` or ``-1``, refused as N).
_LOOKS_NUMERIC = re.compile(r"[+-]?[0-9.]")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _checked(variable: str) -> Callable[[str], str]:
    """The option's value check: the variable's own reading (``settings.read_list``), refusing what it reports.

    The value is passed on as that reading normalises it (``--vendor MUSA`` sets ``musa``), so
    the program (and every child) reads the option exactly as it reads the variable:
    ``--registry pkg.mod:setup`` is ``FL_PATCH_REGISTRY=pkg.mod:setup``.
    """

    def check(value: str) -> str:
        items, problems = read_list(variable, value)
        if problems:
            raise argparse.ArgumentTypeError(problems[0].removeprefix("fl_patch: ").removesuffix("; it is ignored"))
        return ",".join(items)  # normalised as the variable's reading normalises it: the same meaning

    check.__name__ = variable  # what argparse names in "invalid ... value"
    return check


def _check_filter(value: str) -> tuple[str, str]:
    key, eq, wanted = value.partition("=")
    key = key.strip().lower()
    if not eq or key not in FILTER_KEYS:
        hint = did_you_mean(key, FILTER_KEYS) if eq else ""
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE with KEY one of {', '.join(FILTER_KEYS)}{hint}")
    return key, wanted.strip()


def _compare_count(value: str) -> str:
    """``--compare N``: a whole number of calls (0: off); anything else is a usage error."""
    if not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of calls (a whole number, e.g. --compare 5)")
    return str(int(value))


_compare_count.__name__ = ENV.COMPARE  # what argparse names in "invalid ... value"

_TYPES = {variable: _checked(variable) for variable in (ENV.PREFER, ENV.REGISTRY, ENV.TRIGGERS)}
_TYPES[ENV.COMPARE] = _compare_count


def build_parser(prog: str) -> argparse.ArgumentParser:
    """The parser for the words before the program, built from ``fl_patch.config.options``."""
    parser = _Parser(prog=prog, add_help=False, allow_abbrev=False)
    for row in OPTIONS:
        if not row.flags:
            continue
        if row.kind == "local":
            parser.add_argument(*row.flags, dest=row.flags[0][2:].replace("-", "_"), action="store_true")
        elif row.kind == "switch":
            parser.add_argument(*row.flags, dest=row.variable, action="store_const", const=row.value)
        elif row.kind == "optional":
            parser.add_argument(
                *row.flags, dest=row.variable, nargs="?", const=row.value, type=_TYPES[row.variable or ""]
            )
        else:
            action = "append" if row.kind == "append" else "store"
            parser.add_argument(*row.flags, dest=row.variable, action=action, type=_TYPES.get(row.variable or "", str))
    commands = parser.add_mutually_exclusive_group()
    for row in COMMANDS:
        if row.kind == "command":
            name = row.flags[-1][2:]
            commands.add_argument(*row.flags, dest="command", action="store_const", const=name)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--why", action="store_true")
    parser.add_argument("--only", action="append", type=_check_filter, default=[])
    parser.add_argument("--against", action="append", default=[])
    parser.add_argument("--offline", action="store_true")
    return parser


def parse(argv: Sequence[str], prog: str | None = None) -> Options:
    """Options up to the program; the program's own arguments are never looked at."""
    words, program = split(argv)
    words, switched = _switch_values(words)
    namespace = build_parser(prog or prog_name()).parse_args(words)
    options = Options(program=program, command=namespace.command, json=namespace.json, only=namespace.only)
    options.all, options.why = namespace.all, namespace.why
    options.in_process = namespace.in_process
    options.against, options.offline = namespace.against, namespace.offline
    if (options.against or options.offline) and options.command != "check":
        raise UsageError(f"--{'against' if options.against else 'offline'} goes with --check")
    for row in OPTIONS:
        value = getattr(namespace, row.variable, None) if row.variable and row.flags else None
        if value is None:
            continue
        if row.kind == "append":
            options.append[row.variable] = list(value)  # type: ignore[index]
        elif row.variable in (ENV.REPORT_FILE, ENV.COMPARE_JSON):
            options.env[row.variable] = os.path.abspath(value)  # children may chdir
        else:
            options.env[row.variable] = value  # type: ignore[index]
    options.env.update(switched)
    if options.command in ("list", "check") and options.program:
        raise UsageError(f"--{options.command} takes no program")
    if options.command is not None and options.command not in ("list", "check") and options.program:
        raise UsageError(f"--{options.command} takes no program")
    if options.json and options.command not in ("list", "check"):
        raise UsageError("--json goes with --list or --check")
    if options.why and options.command != "list":
        raise UsageError("--why goes with --list")
    if (options.only or options.all) and options.command not in ("list", "check"):
        _report_filters(options)
    if options.command is None and not options.program:
        raise UsageError("no program to run")
    return options


def _report_filters(options: Options) -> None:
    """``--report`` / ``--compare`` with ``--all`` or ``--only K=V``: the program's tables read them from its environment."""
    word = "--only" if options.only else "--all"
    reporting = any(name in options.env or os.environ.get(name) for name in (ENV.REPORT, ENV.COMPARE, ENV.COMPARE_JSON))
    reporting = reporting or ENV.REPORT_FILE in options.env
    if options.command is not None or not reporting:
        raise UsageError(f"{word} goes with --list, --check, --report or --compare")
    if options.all:
        options.env[ENV.REPORT_ALL] = "1"
    if options.only:
        options.env[ENV.REPORT_ONLY] = ",".join(f"{key}={value}" for key, value in options.only)


def _switch_values(words: list[str]) -> tuple[list[str], dict[str, str]]:
    """``--strict=VALUE``: a switch given a value its variable accepts, and what it sets the variable to.

    ``--strict=yes`` is ``--strict``, ``--strict=0`` sets ``FL_PATCH_STRICT=0``; for the
    ``--no-...`` switches the value says whether the ``no`` holds (``--no-flagscale=off`` turns
    the tree back on). A value the variable does not accept as on or off is refused.
    """
    rows = _by_flag()
    kept: list[str] = []
    switched: dict[str, str] = {}
    for word in words:
        name, eq, value = word.partition("=")
        row = rows.get(name)
        if not eq or row is None or row.kind != "switch" or row.variable is None:
            kept.append(word)
            continue
        on = switch_value(value)
        if on is None:
            raise UsageError(
                f"{name}={value!r}: the value of {row.variable}, one of 1, true, yes, on or 0, false, no, off"
            )
        switched[row.variable] = row.value if on else ("0" if row.value == "1" else "1")  # type: ignore[assignment]
    return kept, switched


def _apply_environment(options: Options) -> None:
    os.environ.update(options.env)
    pin_report_file()  # FL_PATCH_REPORT_FILE set by hand, relative: fixed here, before the program starts
    for variable, values in options.append.items():
        existing = [v for v in os.environ.get(variable, "").split(",") if v.strip()]
        added = [v.strip() for value in values for v in value.split(",") if v.strip()]
        os.environ[variable] = ",".join(dict.fromkeys(existing + added))


# --------------------------------------------------------------------------------------- help
def _width() -> int:
    return max(60, min(MAX_WIDTH, shutil.get_terminal_size((100, 24)).columns))


# Where the help's second column starts, in every section alike.
_HELP_COLUMN = 28


def _rows_text(pairs: list[tuple[str, str]], width: int) -> list[str]:
    """Two aligned columns; the second wraps under itself, never past ``width``."""
    import textwrap

    left = _HELP_COLUMN
    lines = []
    for a, b in pairs:
        wrapped = textwrap.wrap(b, max(20, width - left), break_on_hyphens=False) or [""]
        if len(a) + 4 > left:
            lines.append(f"  {a}")
            lines += [" " * left + w for w in wrapped]
        else:
            lines.append(f"  {a:<{left - 2}}{wrapped[0]}")
            lines += [" " * left + w for w in wrapped[1:]]
    return lines


def _label(row: Option) -> str:
    flags = ", ".join(row.flags)
    if row.kind == "optional":
        return f"{flags} [{row.metavar}]"
    return f"{flags} {row.metavar}" if row.metavar else flags


def help_text(prog: str, width: int | None = None) -> str:
    width = width or _width()
    out = [
        _usage(prog),
        "",
        "Run a Python program with fl_patch's import-time patches active in it and in every Python process",
        "it starts (torchrun workers, multiprocessing children, subprocesses).",
        "",
        "options (each sets the environment variable in brackets, which children inherit):",
    ]
    pairs = []
    for row in OPTIONS:
        if row.flags:
            pairs.append((_label(row), row.help + (f" [{row.setting}]" if row.setting else "")))
    out += _rows_text(pairs, width)
    out += ["", "commands (instead of a program):"]
    out += _rows_text([(_label(row), row.help) for row in COMMANDS], width)
    out += ["", "the whole-run compare (docs/compare.md; its options: compare --help):"]
    out += _rows_text(
        [
            (
                "compare --baseline B -- P",
                "run program P twice, upstream (B=upstream) or vendor B, then as configured with --compare on; "
                "each step's loss and grad norm side by side, where they part, the per-call table",
            )
        ],
        width,
    )
    out += ["", "environment variables (set them instead of the options, e.g. for torchrun):"]
    out += _rows_text(
        [(row.setting, row.help + (f" [{row.flags[0]}]" if row.flags else "")) for row in OPTIONS if row.variable],
        width,
    )
    out += [
        "",
        f"Without the launcher: PYTHONPATH=$({prog} --print-pythonpath) torchrun ... activates fl_patch the same way.",
    ]
    return "\n".join(line.rstrip() for line in out) + "\n"


# --------------------------------------------------------------------------------------- main
def _record_start_dir() -> None:
    """Where the job starts: a registry module not on ``sys.path`` is looked for there, by every process of it.

    ``--check`` and ``--list`` look there too, so what they find from a directory the run finds
    from it (``host/registry_lookup.py``); kept when set already (a launcher inside a job: the job's).
    """
    try:
        os.environ.setdefault(ENV.START_DIR, os.getcwd())
    except OSError:
        pass  # the working directory was deleted: nothing can be found there


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m fl_patch`` and ``fl-patch``; returns the exit status."""
    prog = prog_name()
    try:
        options = parse(sys.argv[1:] if argv is None else argv, prog)
    except UsageError as exc:
        sys.stderr.write(f"{_usage(prog)}\n{prog}: error: {exc}\n")
        return 2
    if options.command is not None:
        # This process does the work itself, no program is exec'd: what the bootstrap held
        # back at start-up (the user's sitecustomize) runs here, as in any python process.
        from fl_patch.activation.launch import finish_site

        if options.command in ("list", "check"):
            _apply_environment(options)  # activation reads the options, as the program's process would
            from fl_patch.reporting.notices import silence

            silence()  # the packs' notices: this output says what the packs do, one line each
        finish_site()
    if options.command == "help":
        sys.stdout.write(help_text(prog))
        return 0
    if options.command == "version":
        sys.stdout.write(version_text())
        return 0
    if options.command == "print-pythonpath":
        from fl_patch.host.children import PACKAGE_BOOTSTRAP

        sys.stdout.write(os.path.realpath(PACKAGE_BOOTSTRAP) + "\n")
        return 0
    _apply_environment(options)
    _record_start_dir()
    if options.command is None and options.program[:1] == ["compare"]:
        from fl_patch.compare.run import main as compare_main  # the whole-run compare: two runs of the program

        return compare_main(options.program[1:], prog)
    if options.against:
        from fl_patch.diagnostics.drift import run as drift_run  # --check --against: static, imports no megatron

        return drift_run(options.against, as_json=options.json, offline=options.offline)
    if options.command in ("list", "check"):
        with _stdout_for_json_only(options.json) as out:
            try:
                if options.command == "list":
                    return _list(options, out)
                return _check(options, out)
            except UsageError as exc:
                sys.stderr.write(f"{_usage(prog)}\n{prog}: error: {exc}\n")
                return 2
    from fl_patch.activation.launch import exec_program

    return exec_program(options.program, in_process=options.in_process)


def _distribution_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def version_text() -> str:
    """What a bug report needs: which fl_patch (and from where), Python, torch, megatron-core.

    Read from the installed distributions' metadata: importing torch would take seconds.
    """
    from fl_patch import __file__ as package_file
    from fl_patch import __version__

    megatron = _distribution_version("megatron-core")
    lines = [
        f"fl_patch {__version__} ({os.path.dirname(os.path.abspath(package_file))})",
        f"python {sys.version.split()[0]} ({sys.executable})",
        f"torch {_distribution_version('torch') or 'not installed'}",
        f"megatron-core {megatron or 'not installed (pip install megatron-core; on Python 3.11 add --ignore-requires-python)'}",
    ]
    return "\n".join(lines) + "\n"


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


# ------------------------------------------------------------------------------------ filters
def apply_filters(entries: list, only: list[tuple[str, str]], status_of: str = "status") -> list:
    """Entries of ``--list``/``--check`` that match every ``--only``; a value nothing has is a usage error.

    vendor, source, status and pack compare whole values (``*`` globs; ``pack=none``: the user's); target
    also matches a part of the dotted path (``--only target=clip_grads``). The same rule filters the
    exit report (``reporting/layout.matches``).
    """
    from fl_patch.reporting.layout import matches

    for key, wanted in only:
        attribute = status_of if key == "status" else key
        present = sorted({str(getattr(e, attribute)) for e in entries})
        kept = [e for e in entries if matches(key, wanted, str(getattr(e, attribute)))]
        if not kept and entries and not (key == "pack" and wanted.lower() == "none"):  # none of yours: an answer
            hint = did_you_mean(wanted, present) if key != "target" else ""
            shown = ", ".join(present) if len(present) <= 12 else ", ".join(present[:12]) + ", ..."
            raise UsageError(f"no registration has {key} {wanted!r}{hint}; here: {shown}")
        entries = kept
    return entries


# --------------------------------------------------------------------------------------- list
def _list(options: Options, out: TextIO) -> int:
    from fl_patch.diagnostics.check import list_registrations
    from fl_patch.diagnostics.text import listing
    from fl_patch.reporting.layout import terminal_width

    listed: list[Listed] = apply_filters(list_registrations(), options.only)
    if options.json:
        out.write(json.dumps({"registrations": [entry.as_dict() for entry in listed]}, indent=2) + "\n")
        return 0
    full = options.all or bool(options.only)
    out.write(listing(listed, full=full, why=options.why, width=terminal_width()))
    return 0


# -------------------------------------------------------------------------------------- check
def _check(options: Options, out: TextIO) -> int:
    from fl_patch.diagnostics.check import check
    from fl_patch.diagnostics.text import check_text
    from fl_patch.reporting.layout import terminal_width

    report = check()
    report.results = apply_filters(report.results, options.only, status_of="level")
    if options.json:
        out.write(json.dumps(report.as_dict(), indent=2) + "\n")
        return 1 if report.failed else 0
    out.write(check_text(report, full=options.all or bool(options.only), width=terminal_width()))
    return 1 if report.failed else 0
