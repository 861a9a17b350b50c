"""Strict mode's exit path and its undo (activation/strict.py): ``uninstall()`` takes out the
excepthook and the exit check that strict mode put in, and leaves a program's own hook alone.

The exit itself (status 1 after the program's atexit handlers and the report) is in the
hostile table: tests/support/hostile/hostile_cases/never_break.py, "strict exit ...".
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env

PROGRAM = """
import atexit, sys

# What fl_patch put in atexit's list (atexit._ncallbacks() counts unregistered slots too, on
# 3.11). Only fl_patch's own: a module imported on the way (logging's shutdown) is not strict mode's.
live = []
register, unregister = atexit.register, atexit.unregister
ours = lambda f: (getattr(f, "__module__", None) or "").startswith("fl_patch")
atexit.register = lambda f, *a, **k: (ours(f) and live.append(f), register(f, *a, **k))[1]
atexit.unregister = lambda f: ([live.remove(g) for g in list(live) if g == f], unregister(f))[1]

import fl_patch

hook = sys.excepthook
for _ in range(2):  # a second round trip leaves nothing either
    fl_patch.install()
    assert sys.excepthook is not hook and live, "strict mode armed nothing"
    {between}
    fl_patch.uninstall()
    assert sys.excepthook is {expected_hook}, sys.excepthook
    assert not live, live
print("CLEAN")
"""


@pytest.mark.parametrize(
    ("between", "expected_hook"),
    [
        ("pass", "hook"),
        # The program set its own hook after fl_patch's: uninstall must not take the program's out.
        ("def mine(*a): pass\n    sys.excepthook = mine", "mine"),
    ],
    ids=["fl_patch's hook", "the program's hook set after install"],
)
def test_uninstall_takes_out_strict_modes_excepthook_and_exit_check(
    tmp_path: Path, between: str, expected_hook: str
) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM.format(between=between, expected_hook=expected_hook))
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=clean_env(FL_PATCH_STRICT="1", FL_PATCH_PACKS="none", FL_PATCH_ENTRY_POINTS="0", FL_PATCH_FLAGSCALE="0"),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "CLEAN" in proc.stdout, proc.stderr[-3000:]
