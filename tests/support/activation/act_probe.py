"""A test program: imports act_target, reports what fl_patch did, in one JSON line.

Run as a script, as a module, as a multiprocessing child or a torchrun worker; the
line starts with ``ACT`` so tests find it among other output.
"""

from __future__ import annotations

import json
import os
import sys

from act_target import mod  # the program's first import of a target module


def probe(label: str = "main") -> dict[str, object]:
    import fl_patch

    records = {r.target: r for r in fl_patch.report() if r.vendor == r.chosen_vendor}
    greet = records.get("act_target.mod.greet")
    return {
        "label": label,
        "pid": os.getpid(),
        "installed": fl_patch.is_installed(),
        "greet": mod.greet("x"),
        "hello": mod.Greeter().hello("y"),
        "status": greet.status.value if greet else None,
        "late": greet.late if greet else None,
        "rank": os.environ.get("RANK"),
    }


def emit(data: dict[str, object]) -> None:
    sys.stdout.write("ACT" + json.dumps(data) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    emit(probe(sys.argv[1] if len(sys.argv) > 1 else "main"))
