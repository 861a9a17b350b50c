"""One rank of a gloo program that ends as most do: a collective, ``destroy_process_group``, exit.

Run under torchrun by ``tests/test_gloo_exit.py`` and ``bench/gloo_exit.py``. Environment:
``IMPORTS`` (comma-separated modules imported after the group exists: ``torch._inductor`` is what
megatron-core brings, and it makes finalization long enough to meet torch's exit race),
``SWITCH`` (``sys.setswitchinterval``: a large value keeps the GIL in the main thread, as a busy
training loop does), ``SETTLE`` (1: register fl_patch's exit handler here, for a run without fl_patch).
"""

import importlib
import os
import sys

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
dist.destroy_process_group()
