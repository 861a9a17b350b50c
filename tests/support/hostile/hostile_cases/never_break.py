"""Never break the run, never hang (docs/reliability.md, "Never break the run")."""

from __future__ import annotations

from hostile_case import HostileCase

GROUP = "never break the run"

# A SIGTERM handler that exits lands while a plugin's impl imports: plain python exits 143
# (the handler's status), so must fl_patch; the `except` around plugin code must not eat it.
_SIGTERM_DURING_IMPL = HostileCase(
    GROUP,
    "SIGTERM handler's sys.exit while an impl imports",
    {
        "main.py": """
            import signal, sys
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
            import target_mod
            target_mod.f()
            print("RAN-ON")
        """,
        "target_mod.py": "def f():\n    return 'upstream'\n",
        "slow_impl.py": """
            import os, signal
            os.kill(os.getpid(), signal.SIGTERM)
            def f():
                return 'impl'
        """,
        "reg.py": "from fl_patch import register\nregister('target_mod.f', 'slow_impl.f')\n",
    },
    env={"FL_PATCH_REGISTRY": "reg", "FL_PATCH_TRIGGERS": "target_mod", "PYTHONPATH": "{dir}:{src}"},
    stdout=(),
    not_stdout=("RAN-ON",),
    rc=143,
)

CASES = [_SIGTERM_DURING_IMPL]
