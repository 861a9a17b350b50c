"""A test program that prints how it was run, reads stdin if asked, and exits with a chosen status."""

from __future__ import annotations

import json
import sys

if __name__ == "__main__":
    spec = globals().get("__spec__")
    data = {
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "name": __name__,
        "spec": getattr(spec, "name", None),
        "file": globals().get("__file__"),
        "path0": sys.path[0],
        "main_module": type(sys.modules["__main__"]).__name__,
        "flags": [sys.flags.optimize, sys.flags.dont_write_bytecode, sys.flags.verbose],
    }
    if "--stdin" in sys.argv:
        data["stdin"] = sys.stdin.read()
    sys.stdout.write("ARGV" + json.dumps(data) + "\n")
    if "--raise" in sys.argv:
        raise ValueError("the program failed")
    if "--exit" in sys.argv:
        sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
