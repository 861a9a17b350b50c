"""``bench/suite_cpu.py``: the hook a run's interpreters carry logs each one's own CPU with the test that started it,
imports nothing at start-up but ``atexit``, and that only with its log variable set (tests that watch a program's first
imports see what they would), and the
summary adds them up by test file and program."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO

BENCH = runpy.run_path(str(REPO / "bench" / "suite_cpu.py"), run_name="suite_cpu")


def test_the_hook_logs_each_interpreter_and_the_summary_adds_them_up(tmp_path: Path) -> None:
    (tmp_path / f"{BENCH['_MODULE']}.py").write_text(BENCH["_HOOK"])
    log = tmp_path / "log.jsonl"
    program = (
        f"import sys; import {BENCH['_MODULE']}; "
        "print(sorted(m for m in ('json', 'resource', 'atexit') if m in sys.modules)); sum(range(10**6))"
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "json.py").write_text("raise SystemExit(7)\n")  # a planted json.py: the hook imports nothing at exit
    tests = ("tests/a.py::test_one (call)", "tests/a.py::test_two (call)", 'tests/b.py::test_"3"\\x (call)')
    for test in tests:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "FL_SUITE_CPU_LOG": str(log)}
        env["PYTEST_CURRENT_TEST"] = test
        proc = subprocess.run(
            [sys.executable, "-c", program], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0 and not proc.stderr, proc.stderr
        assert proc.stdout.strip() == "['atexit']", proc.stdout  # nothing else imported before the program's own
    records = BENCH["_records"](log)
    assert [r["test"] for r in records] == list(tests)  # (quotes and backslashes written as JSON)
    assert all(r["argv"] == ["-c"] and r["cpu"] > 0 for r in records), records
    summary = BENCH["summarize"](records, wall=2.0, run_cpu=1.0)
    assert summary["interpreters"] == 3
    assert [(row["file"], row["interpreters"]) for row in summary["by_test_file"]] == [
        ("tests/a.py", 2),
        ("tests/b.py", 1),
    ]
    assert summary["by_program"] == [{"program": "-c", "interpreters": 3, "cpu_s": summary["interpreters_cpu_s"]}]
    json.dumps(summary)  # (what --json writes)


def test_without_the_log_variable_the_hook_does_nothing(tmp_path: Path) -> None:
    (tmp_path / f"{BENCH['_MODULE']}.py").write_text(BENCH["_HOOK"])
    program = f"import sys; import {BENCH['_MODULE']}; print('atexit' in sys.modules)"
    proc = subprocess.run(
        [sys.executable, "-c", program], env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stdout + proc.stderr
