"""Starts a multiprocessing spawn child after dropping the bootstrap from os.environ."""

from __future__ import annotations

import multiprocessing
import os


def child() -> None:
    import sys

    print("CHILD spawn", "fl_patch.activation.startup" in sys.modules, flush=True)


if __name__ == "__main__":
    os.environ["PYTHONPATH"] = os.pathsep.join(
        entry
        for entry in os.environ["PYTHONPATH"].split(os.pathsep)
        if "bootstrap" not in entry and "sitecustomize" not in entry
    )
    process = multiprocessing.get_context("spawn").Process(target=child)
    process.start()  # the warning points here
    process.join()
