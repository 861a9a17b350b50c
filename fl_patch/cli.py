"""The command line: run a program with fl_patch active.

``python -m fl_patch [--vendor V] [--registry MOD] [--strict] script.py args...``
runs ``script.py`` as ``python script.py args...`` would, with the import hook
installed before the program's first import. Options map onto environment
variables, so child processes inherit them.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from ._settings import ENV

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fl_patch",
        description="Run a Python program with fl_patch's import-time patches active.",
    )
    parser.add_argument("--vendor", help="vendor priority list, e.g. 'musa,default' (sets MG_FL_PREFER)")
    parser.add_argument("--registry", action="append", default=[], help="registry module to import (FL_PATCH_REGISTRY)")
    parser.add_argument("--strict", action="store_true", help="any patch problem is an error (FL_PATCH_STRICT=1)")
    parser.add_argument("-m", dest="module", help="run a library module as a script")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="script and its arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.vendor:
        os.environ[ENV.PREFER] = args.vendor
    if args.registry:
        existing = [m for m in os.environ.get(ENV.REGISTRY, "").split(",") if m]
        os.environ[ENV.REGISTRY] = ",".join(existing + args.registry)
    if args.strict:
        os.environ[ENV.STRICT] = "1"
    if not args.module and not args.program:
        _parser().print_usage(sys.stderr)
        return 2

    import fl_patch

    fl_patch.install()
    if args.module:
        sys.argv = [args.module, *args.program]
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    else:
        script, *rest = args.program
        sys.argv = [script, *rest]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runpy.run_path(script, run_name="__main__")
    return 0
