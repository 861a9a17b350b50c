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

In-process mode (``--in-process``; forced when this interpreter runs with ``-I``,
``-E`` or ``-S``, which would keep the new interpreter from reading ``PYTHONPATH`` or
running ``site``; and chosen without a word where exec would not give plain python's
result: the user's ``sitecustomize``/``usercustomize`` already ran here, or the argument
list no longer fits, ``E2BIG``): the program runs here, with the hook installed first,
as the interpreter itself would run it (``run_in_process``). Children started with
``-I``/``-E``/``-S`` are out of reach; the launcher says so.
"""

from __future__ import annotations

import errno
import os
import runpy
import sys
import types
from collections.abc import Sequence

from fl_patch.config.settings import ENV
from fl_patch.core.errors import warn
from fl_patch.host.children import PACKAGE_BOOTSTRAP
from fl_patch.host.interpreter_options import ISOLATION_FLAGS, parse_options

__all__ = [
    "child_environment",
    "customize_ran_here",
    "exec_program",
    "finish_site",
    "interpreter_options",
    "run_in_process",
]

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
    if customize_ran_here():
        # The user's sitecustomize/usercustomize already ran in this process (site ran it
        # before the launcher's first line); a new interpreter would run it a second time.
        # Plain python runs it once, in the program's process: this one.
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
        return run_in_process(program, options)
    # argv[0] as this interpreter was called ("python", a relative path): the new one then
    # computes sys.executable and sys.orig_argv[0] exactly as plain `python program` would.
    argv0 = (getattr(sys, "orig_argv", None) or [sys.executable])[0] or sys.executable
    argv = [argv0, *options, *program]
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    if os.name == "nt" or not hasattr(os, "execv"):
        import subprocess  # only here: it imports threading, which changes how the interpreter shuts down

        return subprocess.call([sys.executable, *argv[1:]])
    try:
        os.execv(sys.executable, argv)
    except OSError as exc:
        if exc.errno != errno.E2BIG:
            raise
        # The arguments fit plain python's exec but not ours (the bootstrap directory and
        # FL_PATCH_BOOTSTRAP in the environment, -m fl_patch's words gone but options kept):
        # the program runs here instead, which is what plain python would have done with it.
        return run_in_process(program, options)
    raise AssertionError("unreachable")  # pragma: no cover


def customize_ran_here() -> bool:
    """Whether ``site`` ran a ``sitecustomize`` that is not fl_patch's bootstrap, or a ``usercustomize``, here.

    One that raised is not in ``sys.modules`` (``site`` reported it and went on), so what
    ``site`` found is looked for again, on ``sys.path`` as it was then: without the entry
    the interpreter put first after ``site`` (the script's directory, or the cwd for ``-m``).
    """
    if sys.flags.no_site:
        return False
    import site

    names = ["sitecustomize"] + (["usercustomize"] if getattr(site, "ENABLE_USER_SITE", False) else [])
    for name in names:
        module = sys.modules.get(name)
        if module is not None:
            if name == "usercustomize" or not _is_bootstrap(getattr(module, "__file__", None)):
                return True
            continue  # the bootstrap itself, which held the user's back in this process
        if _found_at_start_up(name):
            return True  # it was there, and raised: site reported it
    return False


def _found_at_start_up(name: str) -> bool:
    import importlib.machinery

    from fl_patch.runtime import RUNTIME

    # The entry the interpreter put first (the cwd, for -m) is not where site looked; the
    # launcher may have taken it off already (fl_patch/__init__.py), then sys.path is as site saw it.
    taken_off = RUNTIME.launcher_cwd_entry is not None
    path = sys.path if sys.flags.safe_path or taken_off else sys.path[1:]
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
    except (ImportError, OSError, ValueError):
        return False
    return spec is not None and spec.origin is not None and not _is_bootstrap(spec.origin)


def _is_bootstrap(path: str | None) -> bool:
    from fl_patch.activation.bootstrap.sitecustomize import _fl_patch_is_bootstrap

    return bool(path) and _fl_patch_is_bootstrap(path)


def finish_site() -> None:
    """Run the user's ``sitecustomize`` that the bootstrap held back in this launcher process.

    The bootstrap, seeing ``python -m fl_patch``, leaves the user's ``sitecustomize`` to the
    program's process (a re-exec'd interpreter runs it itself). When the program runs in this
    process after all (``--in-process``, ``-I``, an argument list too long to exec), or the
    launcher does something else here (``--check``), it runs now, once, reported as ``site``
    reports it.
    """
    module = sys.modules.get("sitecustomize")
    finish = getattr(module, "_fl_patch_finish_site", None)
    if callable(finish):
        finish()


def run_in_process(program: Sequence[str], options: Sequence[str] = ()) -> int:
    """Install fl_patch here, then run the program as the interpreter itself would run it.

    What ``python program`` shows the program, it shows here: a fresh ``__main__`` module that
    stays ``sys.modules['__main__']`` to the end (atexit handlers, pickle, multiprocessing
    spawn), with the globals the interpreter gives it (``__file__`` absolute and removed after
    a script returns, ``__loader__``, ``__spec__`` None for a script, ``__builtins__`` the
    module); ``sys.argv``, ``sys.path[0]`` and ``sys.orig_argv`` as for ``python program``;
    an uncaught exception printed by ``sys.excepthook`` without the launcher's frames, exit
    status 1; an uncaught ``KeyboardInterrupt`` printed the same way, then the process ends by
    SIGINT after the usual shutdown, as the interpreter does.
    """
    from fl_patch.activation.startup import activate

    finish_site()
    mode, rest = _split(program)
    # sys.path[0] as python would set it, before activation: a registry module next
    # to the script must be importable when fl_patch reads the registries.
    script_path = os.path.abspath(rest[0]) if mode == "script" else ""
    runs_as_package = mode == "script" and _is_main_importer(script_path)
    if not sys.flags.safe_path and sys.path:
        if mode == "-m":
            first = os.getcwd()
        elif mode == "-c":
            first = ""
        elif runs_as_package:
            first = script_path
        else:
            first = os.path.dirname(os.path.realpath(rest[0]))
        if _cwd_entry_taken_off():
            sys.path.insert(0, first)  # the launcher took python -m's entry off (fl_patch/__init__.py)
        else:
            sys.path[0] = first
    elif runs_as_package:
        sys.path.insert(0, script_path)  # python adds a directory or zip it runs even with -P
    orig_argv = list(getattr(sys, "orig_argv", None) or [sys.executable])
    sys.orig_argv = [orig_argv[0], *options, *program]
    activate(PACKAGE_BOOTSTRAP)
    main = _fresh_main()
    sys.modules["__main__"] = main  # kept to the end: never restored to the launcher's
    delete_file = False
    try:
        if mode == "-m":
            module, *args = rest
            sys.argv = ["-m", *args]  # as python has it while runpy finds the module
            _run_module_as_main(module)
        elif mode == "-c":
            source, *args = rest
            sys.argv = ["-c", *args]
            exec(compile(source, "<string>", "exec"), main.__dict__)
        elif runs_as_package:
            sys.argv = list(rest)
            _run_module_as_main("__main__", alter_argv=False)
        else:
            sys.argv = list(rest)
            code = _script_code(script_path, main)
            delete_file = True
            exec(code, main.__dict__)
    except SystemExit:
        raise  # the interpreter exits with it (and keeps __main__.__file__, as it does)
    except BaseException as exc:  # noqa: BLE001  (reported as the interpreter would, without our frames)
        tb = _without_launcher_frames(exc.__traceback__)
        exc = exc.with_traceback(tb)
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
        sys.excepthook(type(exc), exc, tb)
        if delete_file:
            main.__dict__.pop("__file__", None)
        if isinstance(exc, KeyboardInterrupt):
            _end_by_sigint_after_shutdown(exc)
        return 1
    if delete_file:
        main.__dict__.pop("__file__", None)  # python removes it once a script has run
    return 0


def _cwd_entry_taken_off() -> bool:
    from fl_patch.runtime import RUNTIME

    taken = RUNTIME.launcher_cwd_entry is not None
    RUNTIME.launcher_cwd_entry = None  # once: the entry is back
    return taken


def _fresh_main() -> types.ModuleType:
    """``__main__`` as the interpreter creates it at start-up, before the program sets its own globals."""
    import builtins
    import importlib.machinery

    main = types.ModuleType("__main__")
    main.__dict__.update(
        {"__annotations__": {}, "__builtins__": builtins, "__loader__": importlib.machinery.BuiltinImporter}
    )
    return main


def _is_main_importer(path: str) -> bool:
    """A directory or zip file with a ``__main__`` that python runs as a package (``python app.zip``)."""
    if os.path.isdir(path):
        return True
    import zipimport  # what python asks (its path hook), not zipfile, which imports threading

    try:
        zipimport.zipimporter(path)
    except (ImportError, OSError):
        return False
    return True


def _script_code(path: str, main: types.ModuleType) -> types.CodeType:
    """The script's code, compiled as ``python script.py`` compiles it (a ``.pyc`` is run as compiled)."""
    import importlib.machinery
    import importlib.util
    import io
    import marshal

    with io.open_code(path) as handle:
        data = handle.read()
    if data[:4] == importlib.util.MAGIC_NUMBER:
        loader: object = importlib.machinery.SourcelessFileLoader("__main__", path)
        code = marshal.loads(data[16:])
    else:
        loader = importlib.machinery.SourceFileLoader("__main__", path)
        code = compile(data, path, "exec", dont_inherit=True)
    main.__dict__.update({"__file__": path, "__cached__": None, "__loader__": loader})
    return code


def _run_module_as_main(module: str, alter_argv: bool = True) -> None:
    """What ``python -m module`` calls: runpy's own entry point, in the ``__main__`` now in ``sys.modules``."""
    run = getattr(runpy, "_run_module_as_main", None)
    if run is None:  # pragma: no cover  (another Python without it)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    run(module, alter_argv)


def _end_by_sigint_after_shutdown(exc: KeyboardInterrupt) -> None:
    """Let the interpreter finish (atexit, flushing) and then die by SIGINT, as it does for an uncaught Ctrl-C.

    The traceback has been printed; the interrupt is raised on with a one-shot quiet
    ``sys.excepthook``, so the interpreter's own handling of an unhandled
    ``KeyboardInterrupt`` (exit by SIGINT: status -2, or 130 in a shell) applies.
    """
    previous = sys.excepthook

    def quiet_once(kind: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> None:
        sys.excepthook = previous
        if not isinstance(value, KeyboardInterrupt):
            previous(kind, value, tb)

    sys.excepthook = quiet_once
    raise exc.with_traceback(None)


def _split(program: Sequence[str]) -> tuple[str, list[str]]:
    if program and program[0] in ("-m", "-c"):
        return program[0], list(program[1:])
    return "script", list(program)


def _without_launcher_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Drop the leading frames of the launcher, which ``python program`` would not show.

    Only the launcher's own files: runpy's frames below them (``-m module``) are the ones
    plain ``python -m module`` shows too.
    """
    while tb is not None and os.path.realpath(tb.tb_frame.f_code.co_filename) in _OWN_FILES:
        tb = tb.tb_next
    return tb
