"""The command a wrapper runs: ``env -i python x.py`` starts Python, with an empty environment.

A child is often started through a program that runs another one: ``env [-i] [-u NAME]
[VAR=value]... cmd``, ``timeout [options] DURATION cmd``, ``nice [-n N] cmd``, ``nohup``,
``stdbuf``, ``taskset``, ``numactl``, ``ionice``, ``setsid``, ``chrt``, ``time``, ``sudo``,
a shell's ``exec``/``command``. Judging only the first word of the command line missed the
Python child behind them, so a child that ``env -i`` (or ``sudo`` without ``-E``) cut off
from fl_patch was not named. :func:`unwrap` reads each wrapper's own options by the rules
of its manual page (which take a value, how many positional words come before the
command) and what it does to the environment, wrapper after wrapper, down to the command
that really runs. Used by ``activation/children.py`` for every launch, ``shell=True`` or not.

A wrapper that starts no command (``taskset -p PID``, ``ionice -p PID``, ``chrt -p``) gives
None. Programs that are not listed here are the command themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["WRAPPERS", "unwrap"]

Environ = dict[str, str]
Unwrapped = tuple[list[str], Environ, bool]  # (command words, its environment, explicitly set)
_Parser = Callable[[list[str], Environ, bool], "Unwrapped | None"]


def _skip_options(args: list[str], takes_value: frozenset[str], positionals: int = 0) -> tuple[list[str], set[str]]:
    """Words after the wrapper's options (and ``positionals`` words more); and the options seen.

    ``takes_value``: the options that take a value, ``-n`` (``-n 5``, ``-n5``) and ``--adjustment``
    (``--adjustment 5``, ``--adjustment=5``). Option parsing stops at ``--`` or the first word
    that is not an option, as getopt does with POSIXLY_CORRECT (these wrappers all do: the
    command's own options must not be read as theirs).
    """
    seen: set[str] = set()
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        i += 1
        if word.startswith("--"):
            name, eq, _ = word.partition("=")
            seen.add(name)
            if not eq and name in takes_value:
                i += 1
            continue
        for j, letter in enumerate(word[1:], 1):
            seen.add(f"-{letter}")
            if f"-{letter}" in takes_value:
                if j == len(word) - 1:
                    i += 1  # the value is the next word
                break
    return args[i + positionals :], seen


def _options(*names: str) -> frozenset[str]:
    return frozenset(names)


def _env(args: list[str], environ: Environ, explicit: bool) -> Unwrapped | None:
    """``env [-i] [-u NAME] [-C DIR] [-S STRING] [NAME=VALUE]... [cmd]`` (GNU coreutils, BSD)."""
    environ = dict(environ)
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if word in ("-", "-i", "--ignore-environment"):
            environ, explicit, i = {}, True, i + 1
            continue
        if word in ("-u", "--unset"):
            if i + 1 < len(args):
                environ.pop(args[i + 1], None)
            explicit, i = True, i + 2
            continue
        if word.startswith("--unset="):
            environ.pop(word.partition("=")[2], None)
            explicit, i = True, i + 1
            continue
        if word.startswith("-u") and len(word) > 2:
            environ.pop(word[2:], None)
            explicit, i = True, i + 1
            continue
        if word in ("-S", "--split-string") or word.startswith(("--split-string=", "-S")):
            # One string split into words (a #! line's way): the rest of the command is in it.
            import shlex

            value = word.partition("=")[2] if word.startswith("--") else (word[2:] if len(word) > 2 else "")
            rest = args[i + 1 :]
            if not value and rest:
                value, rest = rest[0], rest[1:]
            try:
                args = [*args[:i], *shlex.split(value), *rest]
            except ValueError:
                return None
            continue
        if word in ("-C", "--chdir"):
            i += 2
            continue
        if word.startswith("-") and len(word) > 1 and "=" not in word:
            i += 1  # -0, -v, --debug, --chdir=DIR, ...
            continue
        break
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if not eq or not name:
            break
        environ[name] = value
        explicit, i = True, i + 1
    return args[i:], environ, explicit


def _plain(takes_value: frozenset[str], positionals: int = 0, no_command: frozenset[str] = frozenset()) -> _Parser:
    def parse(args: list[str], environ: Environ, explicit: bool) -> Unwrapped | None:
        rest, seen = _skip_options(args, takes_value, positionals)
        if seen & no_command:
            return None  # it acts on a running process: no command is started
        return rest, environ, explicit

    return parse


def _sudo(args: list[str], environ: Environ, explicit: bool) -> Unwrapped | None:
    """``sudo [options] cmd``: without ``-E`` / ``--preserve-env`` the environment is reset (env_reset)."""
    rest, seen = _skip_options(
        args,
        _options(
            "-u",
            "-g",
            "-C",
            "-D",
            "-h",
            "-p",
            "-r",
            "-t",
            "-U",
            "-T",
            "--user",
            "--group",
            "--close-from",
            "--chdir",
            "--host",
            "--prompt",
            "--role",
            "--type",
            "--other-user",
            "--command-timeout",
        ),
    )
    if seen & {"-E", "--preserve-env"} or any(
        word.startswith("--preserve-env=") for word in args[: len(args) - len(rest)]
    ):
        return rest, environ, explicit
    if seen & {"-i", "--login", "-s", "--shell", "-l", "--list", "-v", "--validate", "-k", "-K", "-V"} and not rest:
        return None
    kept: dict[str, str] = {name: environ[name] for name in ("PATH", "TERM", "HOME", "LANG") if name in environ}
    return rest, kept, True


def _exec(args: list[str], environ: Environ, explicit: bool) -> Unwrapped | None:
    """The shell's ``exec [-cl] [-a NAME] cmd``: ``-c`` runs it with an empty environment."""
    rest, seen = _skip_options(args, _options("-a"))
    if "-c" in seen:
        return rest, {}, True
    return rest, environ, explicit


WRAPPERS: Mapping[str, _Parser] = {
    "env": _env,
    "timeout": _plain(_options("-s", "-k", "--signal", "--kill-after"), positionals=1),
    "nice": _plain(_options("-n", "--adjustment")),
    "nohup": _plain(_options()),
    "stdbuf": _plain(_options("-i", "-o", "-e", "--input", "--output", "--error")),
    "taskset": _plain(_options(), positionals=1, no_command=_options("-p", "--pid")),
    "numactl": _plain(
        _options(
            "-C",
            "-N",
            "-m",
            "-i",
            "-p",
            "-P",
            "-w",
            "-c",
            "-u",
            "--physcpubind",
            "--cpunodebind",
            "--membind",
            "--interleave",
            "--preferred",
            "--preferred-many",
            "--weighted-interleave",
            "--cpucompress",
        )
    ),
    "ionice": _plain(
        _options("-c", "-n", "-p", "-P", "-u", "--class", "--classdata", "--pid", "--pgid", "--uid"),
        no_command=_options("-p", "-P", "-u", "--pid", "--pgid", "--uid"),
    ),
    "setsid": _plain(_options()),
    "chrt": _plain(
        _options("-T", "-P", "-D", "--sched-runtime", "--sched-period", "--sched-deadline"),
        positionals=1,
        no_command=_options("-p", "--pid", "-m", "--max"),
    ),
    "time": _plain(_options("-f", "-o", "--format", "--output")),
    "sudo": _sudo,
    "exec": _exec,
    "command": _plain(_options(), no_command=_options("-v", "-V")),
    "builtin": _plain(_options()),
}
"""Each wrapper's parser: its arguments after its name -> the command it runs, or None for none."""


def unwrap(words: list[str], environ: Mapping[str, str], explicit: bool) -> Unwrapped | None:
    """The command ``words`` really runs, with its environment, through every wrapper in front of it.

    ``explicit``: ``environ`` was set for the launch (not inherited); it becomes True where a
    wrapper sets or clears variables. None when a wrapper runs no command.
    """
    import os

    env = dict(environ)
    for _ in range(32):  # wrappers in front of wrappers; a bound, not a loop without end
        if not words:
            return None
        parser = WRAPPERS.get(os.path.basename(words[0]))
        if parser is None:
            return words, env, explicit
        result = parser(words[1:], env, explicit)
        if result is None:
            return None
        words, env, explicit = result
    return None
