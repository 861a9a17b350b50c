"""Where the test suite's CPU goes: every Python interpreter the run starts, its own CPU time, and the test that started it.

    .venv/bin/python bench/suite_cpu.py [--json OUT] [-- PYTEST_ARGS...]    (default: the README's test command, -q)

Why: the suite is CPU-bound on a 2-core machine, and most of its tests start fresh interpreters (subprocesses,
torchrun ranks, Ray workers). pytest's durations say how long a test took, not what its children spent; this says
how many interpreters the run started and how much CPU each used, by test file and by program.

How: for the run only, a ``.pth`` file in the venv's site-packages makes every interpreter of that venv register an
at-exit hook (it imports nothing at start-up but ``atexit``, and nothing at exit: tests that watch a program's imports,
or plant a ``json.py`` beside it, see what they would see). At exit the hook appends one JSON line (the test from ``PYTEST_CURRENT_TEST``, which children inherit;
``argv``; the process's own user+system CPU) to a log. The ``.pth`` file and the hook's module are removed when the
run ends, whatever its result. An interpreter that ends by ``os._exit`` or a signal writes nothing: the counts are a
lower bound. Processes that are not Python (a Ray raylet, ptxas) are not counted.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_MODULE = "_fl_patch_suite_cpu"
_HOOK = """
import os
_log = os.environ.get("FL_SUITE_CPU_LOG")
if _log:
    import atexit

    def _text(value):
        # a JSON string written by hand: nothing is imported at exit (a test may plant a json.py in the cwd)
        value = "".join(c if c >= " " else " " for c in str(value))
        return '"' + value.replace("\\\\", "\\\\\\\\").replace('"', '\\\\"') + '"'

    def _write(log=_log):
        try:
            import sys  # (loaded at start-up: taken from sys.modules, never from the path)
            times = os.times()
            line = '{"test": ' + _text(os.environ.get("PYTEST_CURRENT_TEST", "")) + ', "argv": ['
            line += ", ".join(_text(a) for a in sys.argv[:3]) + '], "cpu": ' + repr(times.user + times.system) + "}"
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(fd, (line + "\\n").encode())
            os.close(fd)
        except Exception:
            pass

    atexit.register(_write)
"""


def _records(log: Path) -> list[dict]:
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # (a line cut by a process killed while writing)
            continue
    return out


def summarize(records: list[dict], wall: float, run_cpu: float) -> dict:
    by_file: collections.Counter[str] = collections.Counter()
    count_file: collections.Counter[str] = collections.Counter()
    by_program: collections.Counter[str] = collections.Counter()
    count_program: collections.Counter[str] = collections.Counter()
    for r in records:
        test = r["test"].split("::", 1)[0] or "(no test: pytest's own processes)"
        program = " ".join(Path(a).name for a in r["argv"][:2]) or "python"
        by_file[test] += r["cpu"]
        count_file[test] += 1
        by_program[program] += r["cpu"]
        count_program[program] += 1
    return {
        "wall_s": round(wall, 1),
        "cpu_s_all_waited_for": round(run_cpu, 1),
        "interpreters": len(records),
        "interpreters_cpu_s": round(sum(r["cpu"] for r in records), 1),
        "over_1_s_of_cpu": sum(1 for r in records if r["cpu"] > 1.0),
        "by_test_file": [
            {"file": f, "interpreters": count_file[f], "cpu_s": round(c, 1)} for f, c in by_file.most_common()
        ],
        "by_program": [
            {"program": p, "interpreters": count_program[p], "cpu_s": round(c, 1)}
            for p, c in by_program.most_common(25)
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("pytest_args", nargs="*", default=["-q"], help="after --: pytest's arguments (default -q)")
    args = parser.parse_args(argv)
    packages = Path(site.getsitepackages()[0])
    pth, module = packages / f"zz{_MODULE}.pth", packages / f"{_MODULE}.py"
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "interpreters.jsonl"
        env = {**os.environ, "FL_SUITE_CPU_LOG": str(log)}
        module.write_text(_HOOK)
        pth.write_text(f"import {_MODULE}\n")
        start = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", *args.pytest_args], cwd=REPO, env=env)
        finally:
            pth.unlink(missing_ok=True)
            module.unlink(missing_ok=True)
        wall = time.monotonic() - start
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        summary = summarize(_records(log), wall, children.ru_utime + children.ru_stime)
    summary["pytest_exit"] = proc.returncode
    print(
        f"{summary['interpreters']} interpreters, {summary['interpreters_cpu_s']} s of their own CPU "
        f"({summary['over_1_s_of_cpu']} over 1 s) of {summary['cpu_s_all_waited_for']} s for the run, "
        f"wall {summary['wall_s']} s"
    )
    for row in summary["by_test_file"][:20]:
        print(f"{row['cpu_s']:8.1f} s {row['interpreters']:4d}  {row['file']}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
