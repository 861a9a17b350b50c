"""Test support: ``python cpu_launch.py script.py args...`` runs the script with fl_patch installed.

For torchrun workers (``torchrun ... tests/support/cpu_launch.py examples/train_gpt.py``):
torchrun starts each worker as ``python <script>``, so ``python -m fl_patch`` cannot be
put in front of it. This does what the CLI does for a script: install, then run it as
``__main__``. (The CLI's start-up hook that patches torchrun workers and spawn children
is being written separately; this stands in for it in the CPU pack's tests.)
"""

import os
import runpy
import sys

import fl_patch

if __name__ == "__main__":
    fl_patch.install()
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
