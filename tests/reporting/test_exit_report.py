"""Report mode (``--report``, ``FL_PATCH_REPORT=1``): what was applied, how often it ran, what never triggered."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import types
from pathlib import Path

import pytest

from fl_patch.core.patch import build_replacement
from fl_patch.core.resolve import Kind, Resolved
from fl_patch.reporting import exit_report as _exit_report

from ..conftest import REPO, clean_env

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
    lines = report.splitlines()
    # The first line, wrapped to the width (100 without a terminal) with its rest indented.
    head = " ".join(line.strip() for line in lines[: 1 + sum(1 for _ in _continued(lines[1:]))])
    assert "job.py): 2 applied, 1 never triggered, 0 problem(s), 1 applied but never called" in head
    rows = {line.split()[-1]: line.split() for line in lines if line.startswith(("applied", "never triggered"))}
    assert rows["act_target.mod.greet"][:2] == ["applied", "3"]  # status calls vendor target
    assert rows["act_target.mod.Greeter.hello"][:2] == ["applied", "0"]
    assert rows["act_target.unused.never"][:3] == ["never", "triggered", "-"]  # its module was never imported
    assert max(len(line) for line in lines) <= 100, report


def _continued(lines: list[str]) -> list[str]:
    """The lines that continue the one before them (indented), up to the first that does not."""
    out = []
    for line in lines:
        if not line.startswith("  "):
            break
        out.append(line)
    return out


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


def _upstream(x: int, scale: float = 2.0) -> float:
    """Upstream's docstring."""
    return x


def _installed(target: str, impl: object) -> object:
    """What the engine installs at ``target`` (a function of a module) for ``impl`` in report mode."""
    module = types.ModuleType("tests_fake_module")
    name = target.rpartition(".")[2]
    setattr(module, name, _upstream)
    return build_replacement(target, Resolved(module, name, _upstream, True), impl, wrap=_exit_report.make_counter)


def test_counting_wrapper_is_a_plain_function_with_upstreams_face() -> None:
    counted = _installed("tests.fake.target_a", _impl)
    assert inspect.isfunction(counted) and counted is not _impl and counted.__code__ is not _impl.__code__
    # The face every replacement wears (core/patch.py), report mode or not: named where it is installed.
    assert (counted.__name__, counted.__qualname__, counted.__module__) == ("target_a", "target_a", "tests_fake_module")
    assert counted.__doc__ == _upstream.__doc__
    assert counted.__wrapped__ is _upstream  # type: ignore[attr-defined]  # FlagScale impls call Target.__wrapped__
    assert [counted(1), counted(2, scale=3.0)] == [2.0, 6.0]  # the impl runs, not upstream
    assert _exit_report.calls("tests.fake.target_a") == 2


def test_what_is_not_a_plain_function_is_installed_uncounted() -> None:
    def gen(x: int):
        yield x

    async def agen(x: int):
        yield x

    for impl in (gen, agen):  # a wrapper would change what inspect says the function is
        assert _exit_report.make_counter("tests.fake.target_b", impl, _upstream, Kind.FUNCTION) is impl
    for kind in (Kind.STATICMETHOD, Kind.CLASSMETHOD, Kind.PROPERTY):
        assert _exit_report.make_counter("tests.fake.target_b", _impl, _upstream, kind) is _impl
    assert _installed("tests.fake.target_b", len) is len  # a builtin: installed as it is, no code to wrap
    assert _exit_report.calls("tests.fake.target_b") is None  # never counted


def test_async_impls_stay_coroutine_functions() -> None:
    async def fetch(x: int) -> int:
        return x + 1

    counted = _exit_report.make_counter("tests.fake.target_c", fetch, _upstream, Kind.FUNCTION)
    assert inspect.iscoroutinefunction(counted)
    assert asyncio.run(counted(1)) == 2
    assert _exit_report.calls("tests.fake.target_c") == 1


def test_counting_wrapper_inside_torch_compile_fullgraph() -> None:
    """Counting must not break a compiled region; compiled calls are not counted, eager ones are."""
    torch = pytest.importorskip("torch")

    def mask(scores, m):
        return scores * 2.0 + m

    counted = _exit_report.make_counter("tests.fake.target_d", mask, _upstream, Kind.FUNCTION)
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
