"""What fl_patch adds to importing megatron's GPT model and optimizer, in instructions executed (callgrind).

Instruction counts do not depend on what else the machine is doing, so they settle what
wall or CPU time on a shared 2-core machine cannot (``bench/overhead.py``'s import row
moved by +-50 ms between runs of the same code). Variants, each one process under
``valgrind --tool=callgrind``:

* ``by hand``: upstream megatron-core with the one change it needs to import here (a
  stand-in for ``...moe.ops.paged_stash``, which imports triton), put in by hand;
* ``fl_patch, no packs``: the sitecustomize on ``PYTHONPATH``, ``FL_PATCH_PACKS=none``;
* ``fl_patch, every pack``: the sitecustomize on ``PYTHONPATH``, every shipped pack;
* ``fl_patch, no CUDA-on-CPU transfer``: every pack but ``cuda_on_cpu`` (what a machine
  with a GPU loads; the transfer registers only where there is none).

Run:  .venv/bin/python bench/import_instructions.py [--json out.json]   (about 3 minutes per variant)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HAND = (
    "import sys, types\n"
    "s = types.ModuleType('megatron.core.transformer.moe.ops.paged_stash')\n"
    "s.GLOBAL_BLOCK_SIZE = 1024\n"
    "s.paged_stash_copy_kernel = s.paged_stash_pop_kernel = None\n"
    "sys.modules[s.__name__] = s\n"
)
# What a training script imports first (issue 43's start-up figure): megatron-core's GPT model and optimizer.
IMPORTS = "import megatron.core.models.gpt.gpt_model, megatron.core.optimizer\n"
VARIANTS = {
    "by hand": (HAND + IMPORTS, {}),
    "fl_patch, no packs": (IMPORTS, {"template": "1", "FL_PATCH_PACKS": "none"}),
    "fl_patch, every pack": (IMPORTS, {"template": "1"}),
    "fl_patch, no CUDA-on-CPU transfer": (IMPORTS, {"template": "1", "FL_PATCH_CUDA_ON_CPU": "0"}),
}


def _count(name: str, code: str, extra: dict[str, str]) -> int:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k == "MG_FL_PREFER")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure installed bytecode, not recompiling
    env["PYTHONWARNINGS"] = "ignore"
    paths = [str(REPO / "src")]
    if extra.pop("template", None):
        paths.insert(0, str(REPO / "sitecustomize_template"))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(f"{name}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return int(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the counts here")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO / "src" / "fl_patch")], check=False, capture_output=True
    )
    _count("warm-up", "pass", {})  # (valgrind's own first start)
    with ThreadPoolExecutor(args.jobs) as pool:
        counts = dict(zip(VARIANTS, pool.map(lambda item: _count(item[0], *item[1]), VARIANTS.items()), strict=True))
    base = counts["by hand"]
    print("| variant | instructions | vs by hand |")
    print("|---|---|---|")
    for name, count in counts.items():
        print(f"| {name} | {count / 1e9:.3f} G | {count / base - 1:+.2%} |")
    if args.json:
        Path(args.json).write_text(json.dumps(counts, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
