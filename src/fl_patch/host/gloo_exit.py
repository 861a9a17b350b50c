"""At exit, give torch's gloo worker threads the GIL once before the interpreter finalizes.

Why (a torch bug, not fl_patch's or megatron's): a gloo process group runs its collectives on
C++ threads (``pt_gloo_runloop``). When such a thread drops the last reference to a finished
collective (``AsyncAllgatherWork`` and the like) it releases the work's tensors, which are owned
by Python: it must take the GIL. If the main thread has meanwhile returned from the program and
the interpreter is finalizing, ``take_gil`` ends the worker thread with ``pthread_exit``, whose
unwinding meets a ``noexcept`` destructor: ``terminate called without an active exception``, the
rank dies with SIGABRT *after* the program finished, and torchrun reports the job as failed.
Seen on this machine's torch 2.13 (gdb: ``c10d::ProcessGroupGloo::runLoop`` ->
``~AsyncAllgatherWork`` -> ``decref`` -> ``PyEval_AcquireThread`` -> ``PyThread_exit_thread``,
main thread in ``Py_FinalizeEx``). Plain torch, no fl_patch, no megatron: a two-rank
``all_gather_object`` then ``destroy_process_group`` under torchrun aborts in 0 of 30 runs, in 6
of 30 once ``torch._inductor`` is imported (megatron-core imports it: finalizing takes longer),
and in about 3 of 10 when the main thread also keeps the GIL (``sys.setswitchinterval(100)``).
CPU runs of megatron use gloo for every group (nccl is mapped to gloo there), so this hit
fl_patch's CPU training and its tests (docs/reliability.md, "A gloo job that finished does not die at exit").

How: one ``atexit`` handler, registered when fl_patch starts (before the program's own, so it
runs after them: ``atexit`` is last in, first out). If a gloo worker thread exists, it sleeps
:data:`SETTLE_S`, releasing the GIL, so that a worker waiting for it releases its work before
finalization starts; otherwise it does nothing. Measured by ``bench/gloo_exit.py`` (numbers in
docs/reliability.md): the same two-rank program with ``torch._inductor`` aborts in some runs
without the handler and in none with it. A collective still *running* at exit (an ``async_op=True``
never waited on) is not covered: its worker may finish after any wait.

Upstream reference: torch ``c10d/ProcessGroupGloo.cpp`` (``runLoop``), CPython
``Python/ceval_gil.h`` (``take_gil`` exits a thread when finalizing).
When to drop: when torch releases a finished work's Python-owned tensors under the GIL before
signalling completion, or never from a thread that may outlive finalization.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

from fl_patch.runtime import RUNTIME

__all__ = ["SETTLE_S", "gloo_worker_threads", "settle_gloo_workers_at_exit", "withdraw"]

SETTLE_S = 0.05
"""How long the main thread gives up the GIL at exit when a gloo worker thread exists."""

_GLOO_THREAD = "pt_gloo_runloop"  # the name torch gives each gloo worker (ProcessGroupGloo::runLoop)
_TASKS = "/proc/self/task"


def gloo_worker_threads() -> int:
    """How many of this process's threads are gloo workers (-1 where threads cannot be listed)."""
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return -1
    count = 0
    for task in tasks:
        try:
            with open(f"{_TASKS}/{task}/comm") as comm:
                count += comm.read().strip() == _GLOO_THREAD
        except OSError:
            continue  # the thread ended while we looked
    return count


def _settle() -> None:
    if "torch.distributed" not in sys.modules:
        return  # no process group can exist: nothing to wait for
    if gloo_worker_threads() != 0:  # some, or unknown (no /proc): the sleep is cheap beside a training run
        time.sleep(SETTLE_S)


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
