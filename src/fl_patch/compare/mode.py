"""Turning compare mode on in one process: the engine's hook, the table at exit, the step observer.

Called by ``activation.install`` when ``FL_PATCH_COMPARE`` (or ``FL_PATCH_COMPARE_JSON``) asks for a
compare, or ``FL_PATCH_COMPARE_STEPS`` for the whole-run compare's step records. Otherwise it is never
imported, the engine's ``compare`` hook stays None and no wrapper is installed: compare mode costs
nothing when it is off.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any

from fl_patch.compare import wrapper
from fl_patch.config.settings import Settings
from fl_patch.runtime import RUNTIME

__all__ = ["disable", "enable", "report_now"]

_STATE: dict[str, object] = {"registered": False, "reported": False, "calls": 0, "json": None}


def enable(settings: Settings) -> None:
    """Compare the first ``settings.compare_calls`` calls of every patch installed from now on; report at exit."""
    engine = RUNTIME.engine
    if settings.compare_calls:
        wrapper.configure(settings.compare_calls)
        engine.add_wrap(wrapper.wrap_function)
        engine.add_class_wrap(wrapper.wrap_class)
        _STATE.update(
            calls=settings.compare_calls,
            json=settings.compare_json,
            reported=False,
            on=True,
            show_all=settings.report_all,  # --compare --all / --only: as the exit report's
            only=tuple(settings.report_only),
        )
        if not _STATE["registered"]:
            _STATE["registered"] = True
            atexit.register(report_now)
    else:
        disable(engine)
    if settings.compare_steps:
        from fl_patch.compare import steps

        steps.watch(settings.compare_steps, engine)


def disable(engine: Any) -> None:
    """No compare wrapper on what the engine installs from now on (and no table at exit)."""
    engine.remove_wrap(wrapper.wrap_function)
    engine.remove_class_wrap(wrapper.wrap_class)
    _STATE["on"] = False


def report_now() -> None:
    """Print this process's table (stderr) and append its JSON line; once, never failing the exit."""
    if _STATE["reported"] or not _STATE["calls"] or not _STATE.get("on"):
        return  # (None: compare mode was turned off again in this process, as the tests' reset does)
    _STATE["reported"] = True
    try:
        from fl_patch.compare import table

        entries = table.records()
        if not entries:
            return  # a process that never imported a registered target (torchrun's launcher): nothing to say
        calls = int(str(_STATE["calls"]))
        if _STATE["json"]:
            table.write_json(str(_STATE["json"]), table.process_entry(entries, calls))
        stream = sys.stderr
        if stream is not None and not stream.closed:
            only = _STATE.get("only") or ()
            text = table.format_table(entries, calls, show_all=bool(_STATE.get("show_all")), only=only)  # type: ignore[arg-type]
            stream.write(text + "\n")
            stream.flush()
    except Exception as exc:  # noqa: BLE001  (a report must never turn a clean exit into a failure)
        try:
            sys.stderr.write(f"fl_patch: could not write the compare report: {exc!r}\n")
        except Exception:  # noqa: BLE001
            pass
