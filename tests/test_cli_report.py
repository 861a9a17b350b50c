"""Report mode (``--report``, ``FL_PATCH_REPORT=1``): what was applied, how often it ran, what never triggered."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from fl_patch.reporting import exit_report as _exit_report

from .conftest import REPO, clean_env

PROGRAM = """
from act_target import mod
for _ in range(3):
    mod.greet("x")
mod.Greeter()  # constructed, but hello() is never called
"""


def test_report_at_exit_counts_calls_and_names_what_never_triggered(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(PROGRAM)
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", "--report", "--registry", "act_plugin.registry", str(script)],
        env=clean_env(FL_PATCH_PACKS="none"),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = proc.stderr[proc.stderr.index("fl_patch report") :]
    head, *lines = report.splitlines()
    assert "job.py): 2 applied, 1 never triggered, 0 problem(s), 1 applied but never called" in head
    rows = {line.split()[3]: line.split() for line in lines if line.startswith("applied")}
    assert rows["act_target.mod.greet"][1] == "3"  # status calls chosen_vendor target
    assert rows["act_target.mod.Greeter.hello"][1] == "0"
    assert "never triggered (their modules were not imported): act_target.unused.never" in report
    assert max(len(line) for line in lines) <= 120, report


def test_no_report_without_report_mode(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(PROGRAM)
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", "--registry", "act_plugin.registry", str(script)],
        env=clean_env(FL_PATCH_PACKS="none"),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "fl_patch report" not in proc.stderr


def _impl(x: int, scale: float = 2.0) -> float:
    """An impl with a docstring."""
    return x * scale


def test_counting_wrapper_is_a_plain_function_that_looks_like_the_impl() -> None:
    counted = _exit_report.make_counter("tests.fake.target_a", _impl)
    assert inspect.isfunction(counted) and counted is not _impl
    assert counted.__name__ == _impl.__name__ and counted.__qualname__ == _impl.__qualname__
    assert counted.__module__ == _impl.__module__  # the engine's alias sweep reads it
    assert counted.__doc__ == _impl.__doc__
    # Its __wrapped__ is left for the engine to set to the upstream original (FlagScale impls
    # call Target.__wrapped__): pointing it at the impl would make them call themselves.
    assert "__wrapped__" not in vars(counted)
    assert str(inspect.signature(counted)) == str(inspect.signature(_impl))
    assert [counted(1), counted(2, scale=3.0)] == [2.0, 6.0]
    assert _exit_report.calls("tests.fake.target_a") == 2


def test_what_is_not_a_plain_function_is_installed_as_it_is() -> None:
    def gen():
        yield 1

    class Impl:
        pass

    for impl in (gen, Impl, len, staticmethod(_impl)):
        assert _exit_report.make_counter("tests.fake.target_b", impl) is impl


def test_async_impls_stay_coroutine_functions() -> None:
    async def fetch(x: int) -> int:
        return x + 1

    counted = _exit_report.make_counter("tests.fake.target_c", fetch)
    assert inspect.iscoroutinefunction(counted)
    assert asyncio.run(counted(1)) == 2
    assert _exit_report.calls("tests.fake.target_c") == 1


def test_counting_wrapper_inside_torch_compile_fullgraph() -> None:
    """Counting must not break a compiled region; compiled calls are not counted, eager ones are."""
    torch = pytest.importorskip("torch")

    def mask(scores, m):
        return scores * 2.0 + m

    counted = _exit_report.make_counter("tests.fake.target_d", mask)
    holder = {"f": counted}

    def region(scores, m):
        return holder["f"](scores, m) + 0.0

    torch._dynamo.reset()
    compiled = torch.compile(region, fullgraph=True, backend="eager")  # a graph break would raise here
    x, m = torch.ones(2), torch.zeros(2)
    assert torch.equal(compiled(x, m), x * 2.0)
    assert torch.equal(compiled(x, m), x * 2.0)
    assert _exit_report.calls("tests.fake.target_d") == 0
    assert torch.equal(region(x, m), x * 2.0)
    assert _exit_report.calls("tests.fake.target_d") == 1
