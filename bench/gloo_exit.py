"""How often a two-rank gloo program dies at exit (torch's race, ``fl_patch/host/gloo_exit.py``), with and without
fl_patch's exit handler.

Each run is ``torchrun --nproc-per-node 2 tests/support/gloo_exit/worker.py`` (plain torch: a collective, then
``destroy_process_group``) with ``torch._inductor`` imported, as megatron-core does. Counted: runs that exit non-zero and
runs whose output has ``terminate called``. ``--late S`` gives the collective's future a Python callback that sleeps S
seconds on the gloo worker thread (the race made certain without the handler); ``--burn N`` runs N busy processes
beside the runs (the loaded machine the handler must also hold on). Usage:
``python bench/gloo_exit.py [--runs 40] [--switch 100] [--late 0.5] [--burn 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "tests" / "support" / "gloo_exit" / "worker.py"


def run_once(
    settle: bool, switch: str | None, imports: str, late: str | None, timeout: float = 300
) -> tuple[int, bool]:
    """(exit status, whether a rank printed 'terminate called') of one torchrun of the worker."""
    env = {**os.environ, "IMPORTS": imports, "SETTLE": "1" if settle else "0", "FL_PATCH": "0", "LATE": late or ""}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    if switch:
        env["SWITCH"] = switch
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(WORKER)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, "terminate called" in proc.stdout + proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--switch", default=None, help="sys.setswitchinterval in the worker (e.g. 100)")
    parser.add_argument("--imports", default="torch._inductor")
    parser.add_argument("--late", default=None, help="seconds a callback on the collective's future sleeps (e.g. 0.5)")
    parser.add_argument("--burn", type=int, default=0, help="busy processes to run beside the runs (load)")
    args = parser.parse_args()
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL)
        for _ in range(args.burn)
    ]
    results = {}
    try:
        for settle in (False, True):
            failed = aborted = 0
            for _ in range(args.runs):
                code, abort = run_once(settle, args.switch, args.imports, args.late)
                failed += code != 0
                aborted += abort
            name = "with fl_patch's exit handler" if settle else "without"
            results[name] = {"runs": args.runs, "failed": failed, "aborted": aborted}
            print(f"{name}: {failed} of {args.runs} runs failed, {aborted} printed 'terminate called'", flush=True)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    load = os.getloadavg()[0]
    print(
        json.dumps(
            {
                "imports": args.imports,
                "switch": args.switch,
                "late": args.late,
                "burn": args.burn,
                "load_average_1min_at_end": round(load, 1),
                **results,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
