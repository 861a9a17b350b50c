"""Running a program with fl_patch active, as ``python`` itself would run it.

The launcher puts fl_patch's bootstrap directory (``src/fl_patch/activation/bootstrap``, holding
only ``sitecustomize.py``) first on ``PYTHONPATH`` and replaces itself (``os.execv``)
with ``python [the same interpreter options] script.py args...``. The new
interpreter activates fl_patch in ``site``, before the program's first line, and so
does every Python process started below it, because they inherit the environment:
torchrun workers, multiprocessing spawn and forkserver children, subprocesses,
compile workers. This is what ddtrace-run and opentelemetry-instrument do; it is
better than running the program in-process with ``runpy`` (what ``coverage run``
does), because then only this one process is patched (spawn children re-import
``__main__`` in a fresh interpreter with no hook), and because after ``exec`` the
program is exactly ``python script.py``: ``sys.argv``, ``sys.orig_argv``,
``__main__``, ``sys.path[0]``, the exit status, signals and tracebacks are
Python's own, with no launcher frame, and the process id is the launcher's.

In-process mode (``--in-process``, and forced when this interpreter runs with
``-I``, ``-E`` or ``-S``, which would keep the new interpreter from reading
``PYTHONPATH`` or running ``site``): ``runpy`` runs the program here, with the hook
installed first. Children started with the same flags are out of reach; the
launcher says so.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import types
from collections.abc import Sequence

from fl_patch.activation.children import PACKAGE_BOOTSTRAP
from fl_patch.activation.interpreter_options import ISOLATION_FLAGS, parse_options
from fl_patch.activation.settings import ENV
from fl_patch.core.errors import warn

__all__ = ["child_environment", "exec_program", "interpreter_options", "run_in_process"]

# Files whose frames sit between the interpreter and the program in in-process mode.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN_FILES = frozenset(
    os.path.realpath(os.path.join(_PACKAGE, name))
    for name in ("cli.py", os.path.join("activation", "launch.py"), "__main__.py")
)


def child_environment(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with the bootstrap directory first on ``PYTHONPATH`` (once)."""
    bootstrap = os.path.realpath(PACKAGE_BOOTSTRAP)
    current = environ.get("PYTHONPATH", "")
    # Every entry kept as it is, empty ones too: an empty entry means the current directory.
    entries = current.split(os.pathsep) if current else []
    if not any(entry and os.path.realpath(entry) == bootstrap for entry in entries):
        entries.insert(0, bootstrap)
    environ["PYTHONPATH"] = os.pathsep.join(entries)
    environ[ENV.BOOTSTRAP] = bootstrap
    return environ


def interpreter_options(orig_argv: Sequence[str] | None = None) -> list[str]:
    """The options this interpreter was started with, before ``-m fl_patch`` or the ``fl-patch`` script.

    Read from ``sys.orig_argv`` so that every option survives (``-u``, ``-X importtime``,
    ``-W error``), not only those ``sys.flags`` records.
    """
    return parse_options(list(sys.orig_argv if orig_argv is None else orig_argv)[1:])[0]


def _unreachable_flags(options: Sequence[str]) -> set[str]:
    flags = parse_options(options)[1] & ISOLATION_FLAGS
    if "I" in flags:
        flags.discard("E")
    if sys.flags.isolated:
        flags.add("I")
    elif sys.flags.ignore_environment:  # (-I implies it: name only what was asked for)
        flags.add("E")
    if sys.flags.no_site:
        flags.add("S")
    return flags


def exec_program(program: Sequence[str], *, in_process: bool = False) -> int:
    """Run ``program`` (``[script, args...]``, ``["-m", mod, args...]`` or ``["-c", code, args...]``).

    Replaces this process when it can; returns an exit status only in in-process mode
    or where ``exec`` does not exist.
    """
    os.environ.update(child_environment(dict(os.environ)))
    os.environ[ENV.LAUNCHED] = str(os.getpid())  # the program is this process (exec keeps the pid)
    options = interpreter_options()
    flags = _unreachable_flags(options)
    if not sys.executable:  # an embedded interpreter: there is no python to exec
        in_process = True
    if flags or in_process:
        if flags:
            letters = ", ".join(f"-{f}" for f in sorted(flags))
            warn(
                f"fl_patch: this interpreter runs with {letters}, so a new one would not read PYTHONPATH or run "
                "site: the program runs in this process with fl_patch active, but multiprocessing spawn and "
                f"forkserver children (which inherit {letters}) and other children started with {letters} "
                "will run without fl_patch",
                stacklevel=2,
            )
        return run_in_process(program)
    argv = [sys.executable, *options, *program]
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    if os.name == "nt" or not hasattr(os, "execv"):
        return subprocess.call(argv)
    os.execv(sys.executable, argv)
    raise AssertionError("unreachable")  # pragma: no cover


def run_in_process(program: Sequence[str]) -> int:
    """Install fl_patch here, then run the program as ``__main__`` with ``runpy``."""
    from fl_patch.activation.startup import activate

    mode, rest = _split(program)
    # sys.path[0] as python would set it, before activation: a registry module next
    # to the script must be importable when fl_patch reads the registries.
    if not sys.flags.safe_path:
        if mode == "-m":
            first = os.getcwd()
        elif mode == "-c":
            first = ""
        else:
            first = os.path.dirname(os.path.realpath(rest[0]))
        if _cwd_entry_taken_off():
            sys.path.insert(0, first)  # the launcher took python -m's entry off (fl_patch/__init__.py)
        else:
            sys.path[0] = first
    activate(PACKAGE_BOOTSTRAP)
    try:
        if mode == "-m":
            module, *args = rest
            sys.argv = [module, *args]  # runpy replaces argv[0] with the module's path
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        elif mode == "-c":
            code, *args = rest
            sys.argv = ["-c", *args]
            _run_code(code)
        else:
            script, *args = rest
            sys.argv = [script, *args]
            runpy.run_path(script, run_name="__main__")
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001  (reported as the interpreter would, without our frames)
        tb = _without_launcher_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # 3.11 prints exc.__traceback__
        return 1
    return 0


def _cwd_entry_taken_off() -> bool:
    import fl_patch

    taken = fl_patch._LAUNCHER_CWD_ENTRY is not None
    fl_patch._LAUNCHER_CWD_ENTRY = None  # once: the entry is back
    return taken


def _split(program: Sequence[str]) -> tuple[str, list[str]]:
    if program and program[0] in ("-m", "-c"):
        return program[0], list(program[1:])
    return "script", list(program)


def _run_code(code: str) -> None:
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _without_launcher_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Drop the leading frames of the launcher and runpy, which ``python script.py`` would not show."""
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if os.path.realpath(filename) in _OWN_FILES or "runpy" in os.path.basename(filename):
            tb = tb.tb_next
            continue
        break
    return tb
