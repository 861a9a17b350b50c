"""What the bootstrap ``sitecustomize`` calls at interpreter start-up.

Kept apart from the CLI so that start-up imports only what activation needs: the
engine (through ``_activation``) and, when child watching is on, ``_children``.
Neither argparse, nor the checker, nor the report module (report mode only) is
imported here; megatron, torch and installed entry points wait for their first use.
"""

from __future__ import annotations

import os
import sys
import warnings

from ._errors import FlPatchError, FlPatchWarning

__all__ = ["activate"]

_activated = False


def activate(bootstrap_dir: str) -> None:
    """Install fl_patch for this process; never raises.

    A problem becomes one ``FlPatchWarning`` and the program runs without (some)
    patches. With ``FL_PATCH_STRICT=1`` the message goes to stderr and the process
    exits with status 1 before the program starts: strict means a job never runs
    on a configuration that was asked for and not delivered. (``SystemExit`` raised
    inside ``site`` is a fatal interpreter error with a traceback, hence ``os._exit``.)
    """
    global _activated
    if _activated:
        return  # two bootstrap directories on PYTHONPATH chain into each other
    _activated = True
    try:
        from ._activation import ENGINE, install_at_startup

        if not install_at_startup():
            return  # FL_PATCH=0 (read again by the engine's own settings)
        if ENGINE.settings.watch_children:
            from ._children import watch

            watch(bootstrap_dir)
    except Exception as exc:  # noqa: BLE001  (start-up must survive a broken plugin or a bug of ours)
        if isinstance(exc, FlPatchError):
            message = str(exc)  # strict mode's problem, already phrased
        else:
            message = f"fl_patch could not activate in this process: {type(exc).__name__}: {exc}"
        if _strict():
            _stop(message)
        warnings.warn(message, FlPatchWarning, stacklevel=2)


def _strict() -> bool:
    return os.environ.get("FL_PATCH_STRICT", "").strip().lower() in {"1", "true", "yes", "on"}


def _stop(message: str) -> None:
    try:
        sys.stderr.write(f"{message}\n(FL_PATCH_STRICT=1: start-up stops)\n")
        sys.stderr.flush()
    finally:
        os._exit(1)
