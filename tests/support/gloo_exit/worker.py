"""One rank of a gloo program that ends as most do: a collective, ``destroy_process_group``, exit.

Run under torchrun by ``tests/host/test_gloo_exit.py`` and ``bench/gloo_exit.py``. Environment:
``IMPORTS`` (comma-separated modules imported after the group exists: ``torch._inductor`` is what
megatron-core brings; it keeps the group, and its worker threads, alive until finalization),
``SWITCH`` (``sys.setswitchinterval``: a large value keeps the GIL in the main thread, as a busy
training loop does), ``LATE`` (seconds: the collective's future gets a Python callback that
sleeps that long on the gloo worker thread, after the program's own wait has returned, so the
worker needs the GIL again while the program exits; ``finalize``: the callback waits until the
interpreter is finalizing, then wants the GIL: torch's race, certain, which no exit handler can
help, since the worker waits for finalization itself),
``SETTLE`` (1: register fl_patch's exit handler here, for a run without fl_patch).
"""

import importlib
import os
import sys
import time
import types

import torch
import torch.distributed as dist

if os.environ.get("SWITCH"):
    sys.setswitchinterval(float(os.environ["SWITCH"]))
if os.environ.get("SETTLE") == "1":
    from fl_patch.host.gloo_exit import settle_gloo_workers_at_exit

    settle_gloo_workers_at_exit()
dist.init_process_group("gloo")
for name in filter(None, os.environ.get("IMPORTS", "").split(",")):
    importlib.import_module(name)
gathered: list[object] = [None] * dist.get_world_size()
dist.all_gather_object(gathered, dist.get_rank())
assert gathered == list(range(dist.get_world_size())), gathered
late = os.environ.get("LATE", "")
if late:
    read_end, write_end = os.pipe()
    work = dist.all_reduce(torch.ones(4), async_op=True)
    future = work.get_future()

    def _slow_callback(done: torch.futures.Future) -> object:
        if late == "finalize":
            os.read(read_end, 1)  # returns at finalization: the GIL is wanted exactly then, whatever waited
        else:
            time.sleep(float(late))  # gives up the GIL; taking it back is what dies once the interpreter finalizes
        return done.value()

    future.then(_slow_callback)
    future.wait()  # returns once the work is complete, before its callbacks have run (Future::markCompleted)
dist.destroy_process_group()
if late == "finalize":
    # The pipe's write end, held by a module imported last: finalization clears the newest modules first, so
    # it is closed once the interpreter is finalizing (the flag is set before modules are cleared) and before
    # torch's modules let go of the group (whose destructor joins the worker thread).
    signal = types.ModuleType("_gloo_exit_finalizing")
    signal.end = os.fdopen(write_end, "wb")  # type: ignore[attr-defined]
    sys.modules[signal.__name__] = signal
    del signal
