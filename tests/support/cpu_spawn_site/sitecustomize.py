"""Test support: install fl_patch in ``multiprocessing`` spawn children, and only there.

``dist_checkpointing.save`` starts a 'spawn' child (``ctx.Manager()`` in
``strategies/filesystem_async.py``); the child re-imports the main script, hence
megatron, hence ``import triton``, and dies unless fl_patch is active in it. The CLI's
own start-up hook for child processes is being written separately; until it lands,
the CPU pack's tests put this directory on ``PYTHONPATH``. A spawn child's command line
ends with ``--multiprocessing-fork`` (CPython's ``multiprocessing.spawn``), which is
already in ``sys.argv`` when ``sitecustomize`` runs; other processes are left alone, so
the parent is patched by ``python -m fl_patch`` (or the test's launcher) as usual.
"""

import sys

if "--multiprocessing-fork" in sys.argv:
    import fl_patch

    fl_patch.install()
