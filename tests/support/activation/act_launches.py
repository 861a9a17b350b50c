"""A test program that starts Python children fl_patch cannot reach, and one it can.

Each child prints ``CHILD <label> <whether fl_patch is active in it>``.
"""

from __future__ import annotations

import os
import subprocess
import sys

CODE = "import sys; m = sys.modules.get('fl_patch'); print('CHILD', sys.argv[1], bool(m and m.is_active()))"

if __name__ == "__main__":
    run = subprocess.run
    run([sys.executable, "-c", CODE, "inherits"], check=True)
    run([sys.executable, "-I", "-c", CODE, "isolated"], check=True)
    run([sys.executable, "-c", CODE, "bare-env"], env={"PATH": os.environ.get("PATH", "")}, check=True)
    run([sys.executable, "-c", CODE, "other-vendor"], env={**os.environ, "MG_FL_PREFER": "musa"}, check=True)
    run([sys.executable, "-c", CODE, "turned-off"], env={**os.environ, "FL_PATCH": "0"}, check=True)
    sys.stdout.flush()
    os.system(f'{sys.executable} -E -c "{CODE}" shell-E')
