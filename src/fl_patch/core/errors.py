"""How fl_patch reports a problem: one warning by default, an error in strict mode.

The two failure modes a patching agent must avoid pull in opposite directions: a
plugin that silently stops applying (the cluster trains on the wrong kernel for a
week) and a harmless plugin problem that kills a 1,000-GPU job at start-up. So by
default every problem is a single ``FlPatchWarning`` naming the target, the impl
and the cause, recorded in ``report()``, and upstream code keeps running; with
``FL_PATCH_STRICT=1`` the same message is raised as ``FlPatchError``.

A strict error is raised where the problem happens, usually inside an import. Upstream
code that wraps imports in ``try/except`` could swallow it and run on; so every strict
error is also kept here until it ends the process (``activation.strict``), which makes the run
stop anyway: at the next watched import, or at exit.
"""

from __future__ import annotations

# _thread, not threading: once threading is imported the interpreter runs threading._shutdown
# before atexit handlers, after which an import that starts a thread pool (torch's) fails; a
# program that never imported threading must not get that from fl_patch.
import _thread
import functools
import os
import sys
import types
import warnings

__all__ = [
    "FlPatchError",
    "FlPatchWarning",
    "ImplStillLoading",
    "NotYet",
    "PlatformNotReady",
    "ProblemSink",
    "hidden_by_other_filters",
    "is_stop_request",
    "warn",
]


class FlPatchError(RuntimeError):
    """A patch could not be applied and strict mode is on (or the input is unusable)."""


class FlPatchWarning(UserWarning):
    """A patch could not be applied; upstream code runs instead."""


def _filter_names_fl_patch(category: type[Warning], message: object) -> bool:
    """A filter written for fl_patch's own warnings: by its category, or by a pattern naming fl_patch."""
    if issubclass(category, FlPatchWarning):
        return True
    pattern = getattr(message, "pattern", "")
    return isinstance(pattern, str) and "fl_patch" in pattern.lower()


def hidden_by_other_filters(text: str, category: type[Warning], module: str, lineno: int) -> bool:
    """Whether the warning filters would ignore, or raise, this warning by a filter meant for other warnings.

    ``PYTHONWARNINGS=ignore::UserWarning`` (set to hide megatron's import noise) and
    ``-W error`` (a test suite's) are about the program's warnings; a lost patch is not one
    of them, and a plugin problem must not become an exception that breaks a non-strict
    run. A filter that names fl_patch (its category, or ``fl_patch`` in its message
    pattern) is the user's word about fl_patch, and is obeyed. The match is the one
    ``warnings.warn_explicit`` does: the first filter that matches decides.
    """
    for action, message, filter_category, filter_module, filter_lineno in warnings.filters:
        if (
            (message is None or message.match(text))
            and issubclass(category, filter_category)
            and (filter_module is None or filter_module.match(module))
            and (filter_lineno == 0 or filter_lineno == lineno)
        ):
            return action in ("ignore", "error") and not _filter_names_fl_patch(filter_category, message)  # type: ignore[arg-type]  # filters hold a class
    return warnings.defaultaction in ("ignore", "error")  # type: ignore[attr-defined]  # not in typeshed


def warn(
    message: str,
    *,
    where: tuple[str, int] | None = None,
    stacklevel: int = 1,
    category: type[Warning] = FlPatchWarning,
) -> None:
    """Issue one fl_patch warning, through a channel the program's filters for other warnings cannot hide.

    Every fl_patch warning goes through here. ``where`` (file, line) points it at a
    ``register()`` call; otherwise ``stacklevel`` counts frames above the caller, as for
    ``warnings.warn``. Normally this is ``warnings.warn_explicit`` (so ``catch_warnings``,
    ``pytest.warns``, ``logging.captureWarnings`` and ``-W error::FlPatchWarning`` see it);
    when a filter meant for other warnings would drop it (or raise it), the same line
    ``warnings`` would print is written to stderr directly: still one message.
    """
    module_globals: dict[str, object] | None = None
    if where is None:
        frame = _caller(stacklevel)
        if frame is None:
            filename, lineno, module = "sys", 1, "sys"
        else:
            filename, lineno = frame.f_code.co_filename, frame.f_lineno
            module_globals = frame.f_globals
            module = str(frame.f_globals.get("__name__", "<string>"))
    else:
        filename, lineno = where
        module = filename[:-3] if filename.lower().endswith(".py") else filename
    if hidden_by_other_filters(message, category, module, lineno):
        _write_to_stderr(warnings.formatwarning(message, category, filename, lineno))
        return
    warnings.warn_explicit(message, category, filename, lineno, module=module, module_globals=module_globals)


def _caller(stacklevel: int) -> types.FrameType | None:
    """The frame ``stacklevel`` above ``warn``'s caller, skipping the import system's frames as ``warnings`` does."""
    try:
        frame: types.FrameType | None = sys._getframe(2)  # warn's caller
    except ValueError:
        return None
    for _ in range(stacklevel - 1):
        frame = frame.f_back if frame is not None else None
        while frame is not None and _internal(frame):
            frame = frame.f_back
    return frame


def _internal(frame: types.FrameType) -> bool:
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def _write_to_stderr(text: str) -> None:
    stream = sys.stderr if sys.stderr is not None else sys.__stderr__
    try:
        if stream is None:
            raise OSError("no stderr")
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # a closed or missing sys.stderr: the descriptor itself
        try:
            os.write(2, text.encode(errors="replace"))
        except OSError:
            pass


def is_stop_request(exc: BaseException) -> bool:
    """Whether ``exc``, caught around plugin code, is the program's request to stop: re-raise it.

    Every ``except BaseException`` around plugin code (an impl's import, a registry module,
    an entry point, a plugin tree) asks this one function. A plugin's own ``sys.exit()``
    at import is a plugin fault: reported, and the run goes on. But a signal arrives
    wherever the main thread happens to be, and if that is inside a plugin's import, what
    the program's handler raises surfaces there too: it is the program's, not the
    plugin's. So a stop request is

    - ``KeyboardInterrupt`` (Ctrl-C through Python's default SIGINT handler, or raised
      by hand: either way a person or a supervisor asked the process to stop);
    - anything raised by a Python signal handler installed right now
      (``signal.getsignal``): one of the traceback's frames runs a handler's code.
      ``SystemExit`` from ``signal.signal(SIGTERM, lambda *_: sys.exit(143))``, and
      equally torchelastic's ``SignalException`` or a program's own ``Preempted``
      exception, which it catches at its top level to checkpoint.

    Plain python would let each of these end (or unwind) the program; so must fl_patch.
    """
    if isinstance(exc, KeyboardInterrupt):
        return True
    tb = exc.__traceback__
    if tb is None:
        return False
    handlers = _signal_handler_codes()
    if not handlers:
        return False
    while tb is not None:
        if tb.tb_frame.f_code in handlers:
            return True
        tb = tb.tb_next
    return False


def _signal_handler_codes() -> set[types.CodeType]:
    """The code objects of the Python signal handlers installed now (asked only when an exception is caught)."""
    import signal  # deferred: needed only once something was caught

    codes: set[types.CodeType] = set()
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        code = _code_of(handler)
        if code is not None:
            codes.add(code)
    return codes


def _code_of(handler: object) -> types.CodeType | None:
    """The code a handler runs first: a function's, a bound method's, a partial's function's, a callable object's ``__call__``."""
    for _ in range(8):  # partial of a bound method of ...: a few layers, never a loop
        if isinstance(handler, functools.partial):
            handler = handler.func
        elif isinstance(handler, types.MethodType):
            handler = handler.__func__
        elif isinstance(handler, types.FunctionType):
            return handler.__code__
        elif handler is None or isinstance(handler, (int, types.BuiltinFunctionType)):
            return None  # SIG_DFL / SIG_IGN, a C handler, or none from Python
        else:
            call = type(handler).__call__ if callable(handler) else None
            if call is None or isinstance(call, (types.WrapperDescriptorType, types.MethodWrapperType)):
                return None
            handler = call
    return None


class NotYet(Exception):
    """Internal: a target cannot be applied yet, but is not broken; the engine retries it later.

    ``blocker`` is the module whose import is under way: the retry waits for it to finish.
    """

    def __init__(self, message: str, blocker: str) -> None:
        super().__init__(message)
        self.blocker = blocker


class ImplStillLoading(NotYet):
    """The impl's module is being imported right now (it imported the target's module)."""


class PlatformNotReady(NotYet):
    """The vendor cannot be chosen while torch itself is importing."""


class ProblemSink:
    """Turns problems into exactly one warning each, or raises them in strict mode."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = _thread.allocate_lock()
        self.strict = False
        self.failures: list[FlPatchError] = []  # strict errors raised, in order
        self.delivered: set[int] = set()  # ids of those that reached the top (the process ends with them)

    def problem(self, message: str, *, where: tuple[str, int] | None = None) -> None:
        """Report ``message``; ``where`` (file, line) points the warning at the register() call."""
        if self.strict:
            error = FlPatchError(message)
            with self._lock:
                self.failures.append(error)
            raise error
        with self._lock:
            if message in self._seen:
                return
            self._seen.add(message)
        warn(message, where=where, stacklevel=3)

    def swallowed(self) -> FlPatchError | None:
        """The first strict error that was raised but has not ended the process (something caught it)."""
        with self._lock:
            return next((e for e in self.failures if id(e) not in self.delivered), None)

    def reset(self) -> None:
        with self._lock:
            self._seen.clear()
            self.failures.clear()
            self.delivered.clear()

    def after_fork_in_child(self) -> None:
        # A lock held by another thread at fork time would stay held forever in the child.
        self._lock = _thread.allocate_lock()
