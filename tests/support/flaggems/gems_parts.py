"""Several checks of ``tests/impls/test_flaggems_interpret.py`` in one Python process, one after another.

Why: a fresh interpreter spends seconds of CPU importing torch and Triton (and megatron-core) before it checks
anything; the checks run here need no process of their own (none is about start-up or activation), only the
environment their process would have had, which the test gives this one.

``python gems_parts.py PARTS``: ``PARTS`` is a JSON list; each part is ``{"name": ..., "script": path}`` (run as
``__main__`` with ``sys.argv`` ``[path, *argv]``, as ``python path argv...`` runs it) or ``{"name": ..., "code":
source}`` (as ``python -c source argv...``), with optional ``"argv"`` and ``"env"`` (variables set for that part
alone: ``os.environ`` and ``sys.argv`` are put back after each part). A part's standard output is captured; an
exception or a ``sys.exit`` ends that part only, and the next one runs. Prints one JSON line per part as it ends:
``{"name", "exit", "stdout", "error"}``, ``exit`` the status its own process would have exited with, ``error``
the traceback of an exception (null without one). Exits 0 once every part has run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
import traceback


def run_part(part: dict) -> dict[str, object]:
    """Run one part as its own process would; its name, exit status, standard output and traceback."""
    saved_env, saved_argv = dict(os.environ), sys.argv
    out = io.StringIO()
    status: int = 0
    error: str | None = None
    os.environ.update(part.get("env", {}))
    try:
        with contextlib.redirect_stdout(out):
            if "script" in part:
                sys.argv = [part["script"], *part.get("argv", [])]
                runpy.run_path(part["script"], run_name="__main__")
            else:
                sys.argv = ["-c", *part.get("argv", [])]
                exec(compile(part["code"], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:  # sys.exit(n): n, or 1 with a message (as the interpreter exits)
        status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        error = None if isinstance(exc.code, int) or exc.code is None else str(exc.code)
    except Exception:  # noqa: BLE001  (whatever fails, the part reports it and the next one runs)
        status, error = 1, traceback.format_exc()
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
    return {"name": part["name"], "exit": status, "stdout": out.getvalue(), "error": error}


def main(argv: list[str]) -> int:
    for part in json.loads(argv[1]):
        print(json.dumps(run_part(part)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
