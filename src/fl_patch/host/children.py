"""Saying so when this process starts a Python child that fl_patch will not reach.

fl_patch reaches a child through the environment: the bootstrap directory on
``PYTHONPATH`` makes the child's ``site`` import fl_patch's ``sitecustomize``. A child
started with ``-I``, ``-E`` or ``-S``, with an environment that drops the bootstrap
directory (``env={...}`` built from scratch, ``env -i``), or with fl_patch's variables
set differently, runs without those patches, or with other ones. The child cannot
say so (nothing of fl_patch runs in it), so the parent does, at the moment it starts
the child: the functions every launch goes through are wrapped (``os.execv``,
``os.execve``, ``os.posix_spawn``, ``os.posix_spawnp``, ``os.system``, and
``_posixsubprocess.fork_exec``, which ``subprocess.Popen`` and multiprocessing's spawn
and forkserver start methods call), and for one that starts Python (an interpreter by
name, or a script whose ``#!`` line names one, such as ``torchrun``) they give one
``FlPatchWarning`` per cause and executable. ``os.execl*``, ``os.spawn*`` and
``subprocess`` reach these through module globals, so they are seen too. The command
judged is the one that really runs: behind a shell's ``-c`` line and behind wrappers
(``env -i``, ``timeout``, ``nice``, ``sudo``... read by their own option rules in
``activation/wrappers.py``), with the environment they give it.

Why wrappers and not an audit hook (PEP 578), which sees the same launches: an audit
hook is a Python call on *every* audited event, and importing megatron-core raises
about 53,000 of them (``object.__getattr__``, ``exec``, ``open``, ``import``...):
measured with callgrind, 219 M instructions, about 47 ms of each megatron import. A
wrapper costs nothing but at a launch.

A child of a different interpreter is not judged here: if it can import fl_patch it
is patched; if not, the bootstrap ``sitecustomize`` says so in the child at its first
megatron import. ``FL_PATCH_CHILDREN=0`` keeps the wrappers out.
"""

from __future__ import annotations

import _thread  # not threading: see fl_patch.core.errors
import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from fl_patch.config.settings import ENV
from fl_patch.core.errors import warn
from fl_patch.host.interpreter_options import ISOLATION_FLAGS, parse_options
from fl_patch.host.wrappers import WRAPPERS, unwrap
from fl_patch.runtime import RUNTIME

# Not ``from typing import TYPE_CHECKING``: this module imports no typing at run time (see
# fl_patch/__init__.py). Type checkers read this as theirs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

__all__ = ["PACKAGE_BOOTSTRAP", "diagnose", "interpreter_flags", "watch"]

# The bootstrap is activation's (activation/bootstrap/sitecustomize.py); named here by path, not import.
PACKAGE_BOOTSTRAP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "activation", "bootstrap")

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_FALSE = frozenset({"0", "false", "no", "off"})
# Variables whose difference between parent and child changes what is patched.
_SETTINGS_VARIABLES = (
    ENV.ENABLED,
    ENV.STRICT,
    ENV.DISABLE,
    ENV.REGISTRY,
    ENV.PACKS,
    ENV.PREFER,
    ENV.ENTRY_POINTS,
    ENV.FLAGSCALE,
    ENV.CUDA_ON_CPU,
)
_FLAG_CAUSES = {
    "I": "it is started with -I (isolated mode ignores PYTHONPATH)",
    "E": "it is started with -E (PYTHON* variables, PYTHONPATH among them, are ignored)",
    "S": "it is started with -S (no site import, so no sitecustomize)",
}

# How this process was activated, read when the watch starts: a program may edit
# os.environ later, which is exactly what makes a child lose the bootstrap.
_local = _thread._local()  # what threading.local is


def watch(bootstrap_dir: str | None = None) -> None:
    """Wrap the launch functions (once); ``bootstrap_dir`` is the directory that activated us."""
    state = RUNTIME.children
    for directory in (bootstrap_dir, PACKAGE_BOOTSTRAP):
        if directory:
            state.bootstrap_dirs.add(os.path.realpath(directory))
    if not state.via_pythonpath:
        state.via_pythonpath = _reaches_through_pythonpath(os.environ)
    if state.hooked:
        return
    state.hooked = True
    for name, event in (("execv", "os.exec"), ("execve", "os.exec"), ("posix_spawn", "os.posix_spawn"),
                        ("posix_spawnp", "os.posix_spawn"), ("system", "os.system")):  # fmt: skip
        if hasattr(os, name):
            setattr(os, name, _watched(getattr(os, name), event))
    try:
        import _posixsubprocess
    except ImportError:  # not a POSIX system
        return
    # a wrapper taking the same arguments (typed loosely: it forwards them untouched)
    _posixsubprocess.fork_exec = _watched(_posixsubprocess.fork_exec, "fork_exec")  # type: ignore[assignment]


def _watched(launch: Callable[..., object], event: str) -> Callable[..., object]:
    """``launch``, looking at what it starts first (a real function, so it costs nothing elsewhere)."""

    @functools.wraps(launch)
    def launch_watched(*args: object, **kwargs: object) -> object:
        _on_launch(event, args, kwargs)
        return launch(*args, **kwargs)

    return launch_watched


def _on_launch(event: str, args: tuple[object, ...], kwargs: Mapping[str, object]) -> None:
    if getattr(_local, "busy", False):
        return
    _local.busy = True
    try:
        launch = _launch(event, args, kwargs)
        if launch is not None:
            executable, argv, env = launch
            for cause in diagnose(executable, argv, env):
                _warn(cause, executable, argv)
    except Exception:  # noqa: BLE001  (a diagnostic must never stop a launch)
        pass
    finally:
        _local.busy = False


def _text(value: object) -> str:
    return os.fsdecode(value) if isinstance(value, (str, bytes, os.PathLike)) else str(value)


def _environ(env: object) -> dict[str, str] | None:
    if not isinstance(env, Mapping):
        return None
    return {_text(k): _text(v) for k, v in env.items()}


def _launch(
    event: str, args: tuple[object, ...], kwargs: Mapping[str, object]
) -> tuple[str, list[str], dict[str, str] | None] | None:
    """(executable, argv, explicit environment or None) of a launch."""
    if event == "os.system":
        return _from_shell(_text(args[0] if args else kwargs.get("command")), None)
    if event == "fork_exec":  # (args, executable_list, close_fds, pass_fds, cwd, env, ...)
        argv, executables, env_list = args[0], args[1], args[5]
        executable = executables[0] if isinstance(executables, (list, tuple)) and executables else None
        env: object = None
        if isinstance(env_list, (list, tuple)):
            env = dict(_text(item).partition("=")[::2] for item in env_list)
    else:  # os.exec*, os.posix_spawn*: (path, argv[, env])
        executable, argv = args[0], args[1]
        env = args[2] if len(args) > 2 else kwargs.get("env")
    if isinstance(argv, (str, bytes)):
        argv = [argv]
    words = [_text(a) for a in argv] if isinstance(argv, Sequence) else []
    exe = _text(executable) if executable is not None else (words[0] if words else "")
    return _command(exe, words, _environ(env))


def _command(
    exe: str, words: list[str], environ: dict[str, str] | None, depth: int = 0
) -> tuple[str, list[str], dict[str, str] | None] | None:
    """The command a launch really runs: through a shell's ``-c`` line and every wrapper
    (``env -i``, ``timeout``, ``nice``... ``activation/wrappers.py``), with the environment it gets."""
    if depth > 8:  # sh -c "sh -c '...'" nested without end: judge no further
        return None
    script = _shell_command(exe, words)
    if script is not None:
        return _from_shell(script, environ, depth)
    if os.path.basename(exe) in WRAPPERS or (words and os.path.basename(words[0]) in WRAPPERS):
        unwrapped = unwrap(words or [exe], os.environ if environ is None else environ, environ is not None)
        if unwrapped is None:
            return None
        inner, env, explicit = unwrapped
        return _command(inner[0], inner, env if explicit else None, depth + 1)
    return exe, words, environ


def _shell_command(exe: str, words: list[str]) -> str | None:
    """The command line of ``sh -c LINE`` (``bash -lc LINE``, ``sh -e -c LINE``), else None."""
    if os.path.basename(exe) not in _SHELLS:
        return None
    for i, word in enumerate(words[1:], 1):
        if not word.startswith("-") or word.startswith("--") or word == "-":
            return None
        if "c" in word[1:]:
            return words[i + 1] if i + 1 < len(words) else None
    return None


def _from_shell(
    command: str, env: dict[str, str] | None, depth: int = 0
) -> tuple[str, list[str], dict[str, str] | None] | None:
    """The first simple command of a shell line, with its ``VAR=value`` prefixes and wrappers."""
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        return None
    environ = dict(os.environ if env is None else env)
    explicit = env is not None
    while words:
        name, eq, value = words[0].partition("=")
        if not (eq and name.isidentifier()):
            break
        environ[name] = value
        explicit = True
        words.pop(0)
    if not words:
        return None
    return _command(words[0], words, environ if explicit else None, depth + 1)


def _is_python_name(path: str) -> bool:
    name = os.path.basename(path).lower()
    if name.endswith(".exe"):
        name = name[:-4]
    if not name.startswith("python"):
        return False
    rest = name[len("python") :].rstrip("wtdmu")
    return all(part.isdigit() for part in rest.split(".") if part) and not rest.startswith(".")


def _resolve(executable: str, environ: Mapping[str, str]) -> str | None:
    if os.sep in executable:
        return executable if os.path.isfile(executable) else None
    import shutil

    return shutil.which(executable, path=environ.get("PATH", os.defpath))


def _shebang_options(path: str) -> list[str] | None:
    """The interpreter options of a script whose ``#!`` line names Python, else None."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if w != "-S"]
    if not words or not _is_python_name(words[0]):
        return None
    return words[1:]


def interpreter_flags(options: Sequence[str]) -> set[str]:
    """Which of -I, -E, -S appear among Python's options (up to the script, -c or -m)."""
    return parse_options(options)[1] & ISOLATION_FLAGS


def _reaches_through_pythonpath(environ: Mapping[str, str]) -> bool:
    entries = environ.get("PYTHONPATH", "").split(os.pathsep)
    return any(entry and os.path.realpath(entry) in RUNTIME.children.bootstrap_dirs for entry in entries)


def diagnose(executable: str, argv: Sequence[str], env: Mapping[str, str] | None) -> list[str]:
    """Why a launch of ``argv`` will not run with this process's fl_patch (empty: it will, or it is not Python)."""
    environ: Mapping[str, str] = os.environ if env is None else env
    if environ.get(ENV.ENABLED, "").strip().lower() in _FALSE:
        return []  # turned off on purpose
    if _is_python_name(executable):
        options: list[str] | None = list(argv[1:])
    else:
        resolved = _resolve(executable, environ)
        options = _shebang_options(resolved) if resolved else None
    if options is None:
        return []  # not Python, as far as can be told
    flags = interpreter_flags(options)
    via_pythonpath = (
        _reaches_through_pythonpath(os.environ)
        if RUNTIME.children.via_pythonpath is None
        else RUNTIME.children.via_pythonpath
    )
    if not via_pythonpath:
        # Activated by a sitecustomize in a site directory (the template copied into
        # site-packages): -I and -E do not keep site from running it, -S does.
        flags &= {"S"}
    causes = [_FLAG_CAUSES[flag] for flag in sorted(flags)]
    if via_pythonpath and not _reaches_through_pythonpath(environ):
        causes.append("its environment has no fl_patch bootstrap directory on PYTHONPATH")
    if env is not None:
        changed = [name for name in _SETTINGS_VARIABLES if os.environ.get(name) != env.get(name)]
        if changed and not causes:
            causes.append(
                f"its environment sets {', '.join(changed)} differently, so it is patched with another configuration"
            )
    return causes


def _warn(cause: str, executable: str, argv: Sequence[str]) -> None:
    key = (cause, executable)
    if key in RUNTIME.children.warned:
        return
    RUNTIME.children.warned.add(key)
    shown = " ".join(argv[:6]) + (" ..." if len(argv) > 6 else "")
    message = f"fl_patch: a child Python process will not run with this process's patches: {cause}: {shown}"
    filename, lineno = _launching_line()
    warn(message, where=(filename, lineno))


def _launching_line() -> tuple[str, int]:
    """The line of the program that started the child (not subprocess, os or multiprocessing)."""
    skip = {os.path.realpath(__file__), os.path.realpath(subprocess_file()), os.path.realpath(os.__file__)}
    stdlib_multiprocessing = os.path.join(os.path.dirname(os.path.realpath(os.__file__)), "multiprocessing")
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        real = os.path.realpath(filename)
        if real not in skip and not filename.startswith("<frozen") and not real.startswith(stdlib_multiprocessing):
            return filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


def subprocess_file() -> str:
    module = sys.modules.get("subprocess")
    return getattr(module, "__file__", None) or "subprocess.py"
