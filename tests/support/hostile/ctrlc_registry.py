"""A registry module that is slow to import; the user presses Ctrl-C while it loads (first time only)."""

import os
import signal
import time

from fl_patch import register
from hostile import ctrlc_state

register("hostile.ctrlc_target.f", "hostile.impls.patched")
if not ctrlc_state.interrupted:
    ctrlc_state.interrupted = True
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: KeyboardInterrupt is raised in this sleep
    time.sleep(10)
