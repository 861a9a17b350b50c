"""``bench/support/mlm_results_plugin.py``: every rank's outcomes are recorded under torchrun, failures included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO, clean_env

PLUGIN_DIR = REPO / "bench" / "support"

# No collective: each rank runs these alone. Rank 0 fails at once; rank 1 passes, slowly.
TESTS = """
import os, time

def test_fails_on_rank_0():
    assert os.environ["RANK"] != "0"

def test_slow_on_other_ranks():
    if os.environ["RANK"] != "0":
        time.sleep(3)

def test_after_the_slow_one():
    pass
"""


def _run(tmp_path: Path, *plugin_args: str) -> tuple[int, dict[str, list[str]]]:
    (tmp_path / "test_ranks.py").write_text(TESTS)
    results = tmp_path / "out"
    results.mkdir(exist_ok=True)
    env = clean_env(
        PYTHONPATH=os.pathsep.join([str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")]),
        FL_PATCH_MLM_RESULTS=str(results / "r{rank}.jsonl"),
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "pytest"]
    cmd += ["-q", "-p", "no:cacheprovider", "-o", "addopts=", *plugin_args, "test_ranks.py"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    recorded = {
        path.stem: [json.loads(line)["id"].split("::")[1] for line in path.read_text().splitlines()]
        for path in sorted(results.glob("r*.jsonl"))
    }
    return proc.returncode, recorded


def test_a_rank_with_failures_does_not_end_the_others_before_their_tests_ran(tmp_path: Path) -> None:
    code, recorded = _run(tmp_path, "-p", "mlm_results_plugin")
    every = ["test_fails_on_rank_0", "test_slow_on_other_ranks", "test_after_the_slow_one"]
    assert recorded == {"r0": every, "r1": every}, recorded
    assert code == 0  # torchrun waited for both ranks
