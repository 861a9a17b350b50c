"""A ``register()`` after its module loaded costs what changed, not what is loaded.

The late path must still rebind every module-level name bound to the original (``from t import f``
elsewhere), which used to mean reading every loaded module's namespace on each ``register()``
(~70 ms with megatron-core loaded; ``bench/late_register.py``). The engine keeps an index of who
holds what (``core.bindings.HolderIndex``): after the first late patch, a ``register()`` reads the
namespaces of the modules holding its original and of the original's home, however many modules
are loaded. No timing here: the work done (namespaces read) is what is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys

from ..conftest import REPO, clean_env

CODE = """
import json, sys, types, fl_patch
from fl_patch.runtime import RUNTIME

fl_patch.install()
for i in range({fillers}):  # loaded modules that have nothing to do with the registration
    filler = types.ModuleType(f"filler_{{i}}")
    exec("import os\\ndef g():\\n    return 1\\nclass C:\\n    pass\\n", filler.__dict__)
    sys.modules[filler.__name__] = filler
first, second, user = (types.ModuleType(name) for name in ("late_first", "late_second", "late_user"))
exec("def f():\\n    return 'upstream'\\n", first.__dict__)
exec("def f():\\n    return 'upstream'\\nalias = f\\n", second.__dict__)
sys.modules.update(late_first=first, late_second=second)
user.f = second.f  # what `from late_second import f` leaves behind
sys.modules["late_user"] = user

fl_patch.register("late_first.f", lambda: "impl")  # the first late patch builds the index
fl_patch.register("late_second.f", lambda: "impl")
print("RESULT" + json.dumps({{
    "scanned": RUNTIME.engine.bindings.scanned,
    "calls": [second.f(), second.alias(), user.f()],
}}))
"""


def _run(fillers: int) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", CODE.format(fillers=fillers)],
        env=clean_env(FL_PATCH_PACKS="none", FL_PATCH_ENTRY_POINTS="0", FL_PATCH_FLAGSCALE="0"),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert len(lines) == 1, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads(lines[0][len("RESULT") :])


def test_a_late_register_reads_only_the_modules_that_hold_its_original() -> None:
    few, many = _run(fillers=10), _run(fillers=3000)
    # Still rebound everywhere: the alias in its own module, the name another module imported.
    assert few["calls"] == many["calls"] == ["impl", "impl", "impl"]
    # The holder (late_user) and the home (late_second): two namespaces, whatever else is loaded.
    assert few["scanned"] == many["scanned"] == 2
