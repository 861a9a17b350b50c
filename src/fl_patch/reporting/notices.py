"""A pack's one-line notice (the CUDA-on-CPU transfer, the CPU training defaults): once per job, never in a check.

A notice printed by every process is printed by every rank, every spawn child, every
``--check`` and every plugin test (``fl_patch.testing`` runs a fresh interpreter): the line a
user needs once becomes noise they learn to skip. :func:`say_once_per_job` prints it where the
job's user reads it once: in global rank 0 (or a process with no rank), not in a
multiprocessing child, and not in a process below one that said it already (the keys said are
kept in ``FL_PATCH_SAID``, which children inherit). ``--list``, ``--check`` and
``fl_patch.testing`` set ``FL_PATCH_SAID=*``: their own output says what the packs do.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from fl_patch.config.settings import ENV

__all__ = ["ALL", "say_once_per_job", "silence"]

ALL = "*"
"""``FL_PATCH_SAID=*``: no notice in this process or its children."""


def _said(environ: dict[str, str] | os._Environ[str]) -> set[str]:
    return {key.strip() for key in environ.get(ENV.SAID, "").split(",") if key.strip()}


def _first_process_of_the_job() -> bool:
    from fl_patch.host.ranks import process_rank  # standard library only

    rank = process_rank().rank
    if rank not in (None, 0):
        return False
    import multiprocessing

    # A spawn child is named before it re-imports __main__; a fork child has a parent process.
    return multiprocessing.parent_process() is None and multiprocessing.current_process().name == "MainProcess"


def say_once_per_job(key: str, line: str, *, stream: TextIO | None = None) -> bool:
    """Print ``line`` (one short line) unless this job said ``key`` already or is not where it is read; True if printed."""
    said = _said(os.environ)
    if ALL in said or key in said:
        return False
    os.environ[ENV.SAID] = ",".join(sorted(said | {key}))  # children (a spawn, a subprocess) stay quiet
    if not _first_process_of_the_job():
        return False
    out = sys.stderr if stream is None else stream
    if out is None or out.closed:
        return False
    out.write(line.rstrip("\n") + "\n")
    out.flush()
    return True


def silence() -> None:
    """No notice in this process or its children (``--list``, ``--check``, a plugin test's child)."""
    os.environ[ENV.SAID] = ALL
