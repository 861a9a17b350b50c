"""A test program that starts children every way a training job does; each reports in one ACT line."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

from act_probe import emit, probe


def child(queue: multiprocessing.Queue, label: str) -> None:
    queue.put(probe(label))


if __name__ == "__main__":
    emit(probe("parent"))
    for method in ("spawn", "forkserver"):
        context = multiprocessing.get_context(method)
        queue = context.Queue()
        process = context.Process(target=child, args=(queue, method))
        process.start()
        emit(queue.get(timeout=120))
        process.join()
        assert process.exitcode == 0, (method, process.exitcode)
    probe_script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "act_probe.py")
    sys.stdout.write(
        subprocess.run([sys.executable, probe_script, "subprocess"], capture_output=True, text=True, check=True).stdout
    )
