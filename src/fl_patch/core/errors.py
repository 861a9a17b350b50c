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

import threading
import warnings

__all__ = ["FlPatchError", "FlPatchWarning", "ImplStillLoading", "NotYet", "PlatformNotReady", "ProblemSink"]


class FlPatchError(RuntimeError):
    """A patch could not be applied and strict mode is on (or the input is unusable)."""


class FlPatchWarning(UserWarning):
    """A patch could not be applied; upstream code runs instead."""


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
        self._lock = threading.Lock()
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
        if where is None:
            warnings.warn(message, FlPatchWarning, stacklevel=3)
        else:
            warnings.warn_explicit(message, FlPatchWarning, filename=where[0], lineno=where[1])

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
        self._lock = threading.Lock()
