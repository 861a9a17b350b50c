"""fl_patch's exit handler for torch's gloo race (``fl_patch/host/gloo_exit.py``), on real torch.distributed.

The race: a gloo worker thread that needs the GIL (to release a finished collective's Python-owned tensors, or to
run a Python callback on its future) after the interpreter began finalizing dies with ``terminate called without
an active exception``; the rank exits with SIGABRT after the program finished. The handler waits, at exit, until
every gloo worker is idle.

The torchrun tests do not leave the race to chance, so that they neither pass nor fail by chance on a loaded
machine. ``torch._inductor`` is imported (as megatron-core does), which keeps the group's worker threads alive
until finalization. One run makes the abort certain: a Python callback on the collective's future, on the gloo
worker thread, wakes exactly when the interpreter finalizes (``LATE=finalize``). Under fl_patch the callback
sleeps 0.5 s instead, after the program's own wait returned (``LATE=0.5``): the handler must wait for it, however
loaded the machine; without the handler such a run aborts whenever the program exits within those 0.5 s
(every run of ``python bench/gloo_exit.py --late 0.5``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import SUPPORT, clean_env

WORKER = SUPPORT / "gloo_exit" / "worker.py"
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def _torchrun(tmp_path: Path, *, under_fl_patch: bool, **env: str) -> tuple[int, str]:
    """(exit status, output) of one two-rank torchrun of the worker."""
    launcher = ["-m", "fl_patch"] if under_fl_patch else []
    environ = clean_env(IMPORTS="torch._inductor", **env)
    if not under_fl_patch:
        environ["FL_PATCH"] = "0"
    proc = subprocess.run(
        [sys.executable, *launcher, *TORCHRUN, str(WORKER)],
        env=environ,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, proc.stdout[-3000:] + proc.stderr[-5000:]


def test_gloo_worker_threads_are_counted(run_python, tmp_path) -> None:
    code = (
        "import sys, torch, torch.distributed as dist\n"
        "from fl_patch.host.gloo_exit import gloo_worker_threads\n"
        "before = gloo_worker_threads()\n"
        "dist.init_process_group('gloo', init_method='file://' + sys.argv[1], rank=0, world_size=1)\n"
        # a worker names itself once it runs: after a collective it has (under load, not always at init)
        "dist.all_reduce(torch.ones(1))\n"
        "print(before, gloo_worker_threads())\n"
        "dist.destroy_process_group()\n"
    )
    # a file store: no port to collide with a test running beside this one
    out = run_python("-c", code, str(tmp_path / "store"), env=clean_env(FL_PATCH="0")).stdout
    before, during = map(int, out.split())
    assert before == 0 and during >= 1, (before, during)


def test_idle_workers_end_the_wait(run_python, tmp_path) -> None:
    """One rank, its collective waited for: the workers go idle and the wait ends well before its deadline."""
    code = (
        "import sys, time, torch, torch.distributed as dist\n"
        "from fl_patch.host.gloo_exit import gloo_worker_threads, wait_until_idle\n"
        "dist.init_process_group('gloo', init_method='file://' + sys.argv[1], rank=0, world_size=1)\n"
        "dist.all_reduce(torch.ones(1))\n"
        "start = time.monotonic()\n"
        "print(gloo_worker_threads() > 0, wait_until_idle(deadline_s=60), time.monotonic() - start < 60)\n"
    )
    out = run_python("-c", code, str(tmp_path / "store"), env=clean_env(FL_PATCH="0")).stdout
    assert out.split() == ["True", "True", "True"], out


def test_the_handler_is_registered_before_the_programs_first_line(run_python, tmp_path) -> None:
    """Registered at fl_patch's start (``python -m fl_patch``), so that it runs after the program's own handlers."""
    script = tmp_path / "program.py"
    script.write_text("from fl_patch.runtime import RUNTIME\nprint(RUNTIME.gloo_exit_registered)\n")
    assert run_python("-m", "fl_patch", str(script), env=clean_env(FL_PATCH_PACKS="none")).stdout.split() == ["True"]


@pytest.mark.slow
def test_a_gloo_worker_that_wants_the_gil_while_the_interpreter_finalizes_aborts_the_rank(tmp_path) -> None:
    """torch's race itself, made certain (the callback wakes exactly at finalization): the rank dies with SIGABRT
    after the program returned. What the handler prevents; when this passes no more, torch fixed it (the module's
    "When to drop")."""
    code, output = _torchrun(tmp_path, under_fl_patch=False, LATE="finalize")
    # The abort: libstdc++'s "terminate called" on the rank's stderr, or (when the dying rank's stderr is not
    # flushed) torchrun's report of the signal; either way the rank was killed by SIGABRT.
    assert code != 0 and ("terminate called" in output or "Signal 6 (SIGABRT)" in output), (code, output)


@pytest.mark.slow
def test_two_rank_gloo_programs_exit_cleanly_under_fl_patch(tmp_path) -> None:
    """Under ``python -m fl_patch`` the same program exits 0 with no ``terminate called``: the late callback
    (certain without the handler), and the GIL kept by the main thread (``sys.setswitchinterval(100)``)."""
    for env in ({"LATE": "0.5"}, {"LATE": "0.5", "SWITCH": "100"}):
        code, output = _torchrun(tmp_path, under_fl_patch=True, FL_PATCH_PACKS="none", **env)
        assert code == 0 and "terminate called" not in output, (env, output)
