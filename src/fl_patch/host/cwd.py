"""``python -m fl_patch``: the current directory, which ``-m`` puts first on ``sys.path``, taken off it.

Called once, first thing, by ``fl_patch/__init__.py``; the entry taken off is kept in
``RUNTIME.launcher_cwd_entry`` for the launcher (``activation/launch.py``), which gives the program
exactly the ``sys.path`` plain python gives it.
"""

from __future__ import annotations

import os
import sys

# Not ``from typing import TYPE_CHECKING``: typing costs ~3 ms at every process start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

__all__ = ["take_cwd_off_the_path"]

_RUNPY_FILE = os.path.join(os.path.dirname(os.__file__), "runpy.py")  # runpy unfrozen (a debug build)


def take_cwd_off_the_path() -> str | None:
    """Under ``python -m fl_patch``, take the entry ``-m`` put first on ``sys.path`` (the cwd) off it.

    Python puts the current directory first on ``sys.path`` before running this file, and
    the launcher then imports the standard library (``json``, ``argparse``, ``shlex``,
    ``subprocess``...): from an untrusted directory, a planted ``json.py`` ran, though plain
    ``python /abs/train.py`` never looks there (its ``sys.path[0]`` is the script's
    directory). So the launcher imports nothing from the cwd; the program gets exactly the
    ``sys.path`` plain python gives it (a new interpreter sets its own; in-process mode
    puts back the entry that mode of python would have: ``activation/launch.py``).
    Only when the module ``-m`` runs is fl_patch itself (runpy's frame says so), not when a
    program run with ``-m`` imports fl_patch. Returns the entry taken off, else None.
    """
    if sys.argv[:1] != ["-m"] or sys.flags.safe_path or not sys.path:
        return None
    frame: FrameType | None = sys._getframe(2)  # (the caller is fl_patch/__init__.py)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_run_module_as_main" and code.co_filename in ("<frozen runpy>", _RUNPY_FILE):
            running = str(frame.f_locals.get("mod_name", ""))
            break
        frame = frame.f_back
    else:
        return None
    if running.partition(".")[0] != "fl_patch":
        return None
    first = sys.path[0]
    try:
        is_cwd = os.path.realpath(first or os.curdir) == os.path.realpath(os.getcwd())
    except OSError:  # the cwd was deleted: nothing can be imported from it anyway
        is_cwd = False
    if not is_cwd:
        return None
    del sys.path[0]
    return first
