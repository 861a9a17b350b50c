"""The command a wrapper runs: ``env -i python x.py`` starts Python, with an empty environment.

A child is often started through a program that runs another one: ``env [-i] [-u NAME]
[VAR=value]... cmd``, ``timeout [options] DURATION cmd``, ``nice [-n N] cmd``, ``nohup``,
``stdbuf``, ``taskset``, ``numactl``, ``ionice``, ``setsid``, ``chrt``, ``time``, ``sudo``,
a shell's ``exec``/``command``; and the cluster launchers ``srun`` (``--export``), ``mpirun`` /
``mpiexec`` (``-x``, ``-genv``, ``-genvnone``) and ``ssh`` (the remote host's environment). Judging only the first word of the command line missed the
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


def _words_options(
    args: list[str], one: frozenset[str], two: frozenset[str] = frozenset()
) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Options given as whole words (``-np 4``, ``--mca k v``, ``--export=NONE``, ``-n4``), up to the command.

    For launchers whose single-dash options are words (``-np``, ``-hostfile``), not bundled
    letters. ``one``: options that take a value, ``two``: options that take two. Returns the
    command's words and each option seen with its values.
    """
    seen: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        name, eq, value = word.partition("=")
        if eq:
            seen.append((name, [value]))
            i += 1
        elif word in two:
            seen.append((word, args[i + 1 : i + 3]))
            i += 3
        elif word in one:
            seen.append((word, args[i + 1 : i + 2]))
            i += 2
        elif len(word) > 2 and word[1] != "-" and word[:2] in one:
            seen.append((word[:2], [word[2:]]))  # -n4, -Jname
            i += 1
        else:
            seen.append((word, []))
            i += 1
    return args[i:], seen


_SRUN_VALUE = _options(
    *("-A", "-b", "-c", "-C", "-D", "-d", "-e", "-G", "-i", "-J", "-L", "-m", "-M", "-n", "-N", "-o", "-p", "-q"),
    *("-S", "-t", "-T", "-w", "-W", "-x"),
    *("--account", "--begin", "--cpus-per-task", "--constraint", "--chdir", "--dependency", "--error", "--gpus"),
    *("--input", "--job-name", "--licenses", "--distribution", "--clusters", "--ntasks", "--nodes", "--output"),
    *("--partition", "--qos", "--core-spec", "--time", "--threads", "--nodelist", "--wait", "--exclude"),
    *("--mem", "--mem-per-cpu", "--mem-per-gpu", "--gres", "--mpi", "--export", "--ntasks-per-node"),
    *("--cpu-bind", "--gpus-per-task", "--gpus-per-node", "--gpu-bind", "--het-group", "--jobid", "--reservation"),
    *("--comment", "--mail-type", "--mail-user", "--network", "--nice", "--prolog", "--epilog"),
    *("--task-prolog", "--task-epilog", "--signal", "--time-min", "--tmp", "--uid", "--gid", "--container"),
)


def _srun(args: list[str], environ: Environ, explicit: bool) -> Unwrapped | None:
    """``srun [options] cmd``: each task gets the submitting environment, or what ``--export`` says.

    ``--export=NONE`` gives the task none of it (only Slurm's own ``SLURM_*``), ``--export=A,B=1``
    only those, ``--export=ALL,B=1`` all of it and more; ``SLURM_EXPORT_ENV`` is the default.
    ``--multi-prog`` runs the commands of a file: not judged.
    """
    rest, seen = _words_options(args, _SRUN_VALUE)
    names = {name for name, _ in seen}
    if "--multi-prog" in names or not rest:
        return None
    export = next((values[0] for name, values in seen if name == "--export" and values), None)
    export = export if export is not None else environ.get("SLURM_EXPORT_ENV")
    if export is None or export.strip().upper() in ("", "ALL"):
        return rest, environ, explicit
    items = [item.strip() for item in export.split(",") if item.strip()]
    env: Environ = dict(environ) if any(item.upper() == "ALL" for item in items) else {}
    for item in items:
        name, eq, value = item.partition("=")
        if name.upper() in ("ALL", "NONE", "NIL"):
            continue
        if eq:
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
    env.update({k: v for k, v in environ.items() if k.startswith("SLURM_")})
    return rest, env, True


_MPI_VALUE = _options(
    *("-n", "-np", "-c", "--np", "-H", "-host", "--host", "-hostfile", "--hostfile", "-machinefile"),
    *("--machinefile", "--map-by", "-map-by", "--bind-to", "-bind-to", "--rank-by", "-rank-by", "-x"),
    *("-wdir", "--wdir", "-wd", "-cwd", "--prefix", "-N", "--npernode", "-npernode", "--output-filename"),
    *("--tune", "-f", "-hosts", "-ppn", "-genvlist", "-envlist", "-launcher", "-bootstrap", "-iface"),
    *("-rmk", "-profile", "--personality", "--runtime-options", "--display", "--timeout", "-timeout"),
)
_MPI_TWO = _options("--mca", "-mca", "--gmca", "-gmca", "--prtemca", "-genv", "-env")


def _mpirun(args: list[str], environ: Environ, explicit: bool) -> Unwrapped | None:
    """``mpirun`` / ``mpiexec`` (Open MPI, MPICH's Hydra, Intel MPI): local ranks get this environment.

    ``-x NAME=value`` / ``-genv NAME value`` / ``-env NAME value`` set a variable for the
    ranks; ``-genvnone`` passes none of the environment (Hydra). Ranks on other hosts get
    the variables their launcher forwards; what a local rank gets is judged. ``--app`` /
    ``-configfile`` run the commands of a file: not judged.
    """
    rest, seen = _words_options(args, _MPI_VALUE, _MPI_TWO)
    env = dict(environ)
    for name, values in seen:
        if name in ("--app", "-configfile", "--configfile"):
            return None
        if name == "-genvnone":
            env, explicit = {}, True
        elif name == "-x" and values and "=" in values[0]:
            key, _, value = values[0].partition("=")
            env[key], explicit = value, True
        elif name in ("-genv", "-env") and len(values) == 2:
            env[values[0]], explicit = values[1], True
    if not rest:
        return None
    return rest, env, explicit


_SSH_VALUE = _options(*(f"-{letter}" for letter in "BbcDEeFIiJLlmOopQRSWw"))


def _ssh(args: list[str], environ: Environ, explicit: bool) -> Unwrapped | None:
    """``ssh [options] host command...``: the command runs on that host, in its shell, with that host's environment.

    None of this process's environment goes with it (only ``SendEnv`` names, locale
    variables), so a Python started there is reached only if that host's own environment
    (or the command line, ``PYTHONPATH=... python``) activates fl_patch.
    """
    rest, _ = _skip_options(args, _SSH_VALUE, positionals=1)
    if not rest:
        return None  # an interactive login: no command to judge
    return ["sh", "-c", " ".join(rest)], {}, True


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
    # cluster launchers (issue 46): their ranks are this process's children on this host
    "srun": _srun,
    "mpirun": _mpirun,
    "mpiexec": _mpirun,
    "orterun": _mpirun,
    "prterun": _mpirun,
    "mpiexec.hydra": _mpirun,
    "ssh": _ssh,
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
