"""At exit, wait until torch's gloo worker threads no longer need the GIL, before the interpreter finalizes.

Why (a torch bug, not fl_patch's or megatron's): a gloo process group runs its collectives on
C++ threads (``pt_gloo_runloop``). When such a thread drops the last reference to a finished
collective (``AsyncAllgatherWork`` and the like) it releases the work's tensors, which are owned
by Python: it must take the GIL. A Python callback on the work's future (``work.get_future().then``,
DDP's communication hooks) runs on that thread too, and takes the GIL. The program's own wait
returns as soon as the work is marked complete, before that tail has run. If the main thread has
meanwhile returned from the program and the interpreter is finalizing, ``take_gil`` ends the
worker thread with ``pthread_exit``, whose unwinding meets a ``noexcept`` destructor: ``terminate
called without an active exception``, the rank dies with SIGABRT *after* the program finished, and
torchrun reports the job as failed. Seen on this machine's torch 2.13 (gdb:
``c10d::ProcessGroupGloo::runLoop`` -> ``~AsyncAllgatherWork`` -> ``decref`` ->
``PyEval_AcquireThread`` -> ``PyThread_exit_thread``, main thread in ``Py_FinalizeEx``).

Why the threads are still there at exit: ``destroy_process_group`` joins them only when the last
reference to the group goes, and ``torch.distributed.nn.functional`` (imported by
``torch._inductor``, which megatron-core imports) binds ``group.WORLD`` as a default argument when
it is imported, so a group that existed then lives until the interpreter tears its modules down.

How: one ``atexit`` handler, registered when fl_patch starts (before the program's own, so it runs
after them: ``atexit`` is last in, first out). When gloo worker threads exist, it gives up the GIL
in short sleeps until every one of them is *idle*: asleep (``State: S`` in
``/proc/self/task/TID/status``) with the same context-switch counts across a sleep in which the
main thread released the GIL, while no thread outside ``threading`` runs Python code
(``sys._current_frames``). Releasing the GIL signals a thread waiting for it, which then is
runnable or has run, so a worker waiting for the GIL, or preempted in its tail, is never counted
idle; a worker inside a Python callback has a frame. The wait is bounded (:data:`DEADLINE_S`): a
collective still *running* at exit (an ``async_op=True`` never waited on) blocks in the network,
looks idle, and is not covered.

Before this, the handler slept a fixed 50 ms: enough on an idle machine, not on a loaded one (one
abort in six runs of the test while another process kept both cores busy), and never for a
callback longer than the sleep (``tests/support/gloo_exit/worker.py`` with ``LATE=0.5`` aborts in
every run under it).

Upstream reference: torch ``c10d/ProcessGroupGloo.cpp`` (``runLoop``), ``ATen/core/ivalue.cpp``
(``Future::markCompleted`` wakes waiters before it runs callbacks), CPython ``Python/ceval_gil.h``
(``take_gil`` exits a thread when finalizing).
When to drop: when torch releases a finished work's Python-owned tensors under the GIL before
signalling completion, or never from a thread that may outlive finalization.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

from fl_patch.runtime import RUNTIME

__all__ = [
    "DEADLINE_S",
    "POLL_S",
    "gloo_worker_threads",
    "settle_gloo_workers_at_exit",
    "wait_until_idle",
    "withdraw",
]

POLL_S = 0.005
"""How long the main thread gives up the GIL between two looks at the gloo worker threads."""

DEADLINE_S = 5.0
"""The longest the handler holds a finished program's exit (a worker that never goes idle)."""

_GLOO_THREAD = "pt_gloo_runloop"  # the name torch gives each gloo worker (ProcessGroupGloo::runLoop)
_TASKS = "/proc/self/task"

# A thread's state, and how often it was switched out: unchanged across a GIL release means it did not run.
Sample = tuple[str, int, int]


def _gloo_tids() -> list[str] | None:
    """This process's gloo worker threads' ids (None where threads cannot be listed)."""
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return None
    found = []
    for task in tasks:
        try:
            with open(f"{_TASKS}/{task}/comm") as comm:
                if comm.read().strip() == _GLOO_THREAD:
                    found.append(task)
        except OSError:
            continue  # the thread ended while we looked
    return found


def gloo_worker_threads() -> int:
    """How many of this process's threads are gloo workers (-1 where threads cannot be listed)."""
    tids = _gloo_tids()
    return -1 if tids is None else len(tids)


def _sample(tid: str) -> Sample | None:
    """(state letter, voluntary, involuntary context switches) of a thread; None once it has ended."""
    state, voluntary, involuntary = "?", -1, -1
    try:
        with open(f"{_TASKS}/{tid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key == "State":
                    state = value.strip()[:1]
                elif key == "voluntary_ctxt_switches":
                    voluntary = int(value)
                elif key == "nonvoluntary_ctxt_switches":
                    involuntary = int(value)
    except (OSError, ValueError):
        return None
    return state, voluntary, involuntary


def _foreign_python_running() -> bool:
    """Whether a thread that ``threading`` did not start runs Python code now (a C++ thread's callback)."""
    import threading

    ours = set(threading._active)  # type: ignore[attr-defined]  # every thread threading started or adopted
    ours.add(threading.get_ident())
    return any(ident not in ours for ident in sys._current_frames())


def wait_until_idle(deadline_s: float = DEADLINE_S, poll_s: float = POLL_S) -> bool:
    """Give up the GIL until every gloo worker thread is idle (see the module doc); False if the deadline passed."""
    end = time.monotonic() + deadline_s
    previous: dict[str, Sample | None] | None = None
    while True:
        tids = _gloo_tids()
        if tids is None:
            time.sleep(poll_s)  # no /proc: one sleep, as much as can be done blind
            return True
        if not tids:
            return True
        time.sleep(poll_s)  # the GIL released: a worker waiting for it is signalled, and runs
        now = {tid: _sample(tid) for tid in tids}
        quiet = previous is not None and all(
            sample is None or (sample[0] == "S" and previous.get(tid) == sample) for tid, sample in now.items()
        )
        if quiet and not _foreign_python_running():
            return True
        if time.monotonic() >= end:
            return False
        previous = now


def _settle() -> None:
    if "torch.distributed" not in sys.modules:
        return  # no process group can exist: nothing to wait for
    wait_until_idle()


def settle_gloo_workers_at_exit() -> None:
    """Register the exit handler once per process (at fl_patch's start, before the program's own handlers)."""
    if not RUNTIME.gloo_exit_registered:
        RUNTIME.gloo_exit_registered = True
        atexit.register(_settle)


def withdraw() -> None:
    """Take the handler out again (``fl_patch.uninstall()`` leaves nothing of fl_patch behind)."""
    if RUNTIME.gloo_exit_registered:
        RUNTIME.gloo_exit_registered = False
        atexit.unregister(_settle)
