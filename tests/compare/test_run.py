"""The whole-run compare, ``fl-patch [options] compare --baseline upstream -- program``, on the demo (real megatron).

The planted wrong plugin makes the runs part (at step 2 here: at step 1 its loss is within 5e-4 and its grad norm
within 5e-3 of upstream's, inside the default tolerances) and the per-call table of the second run names every wrong
impl; ``examples/my_plugin`` computes what upstream computes, so the two runs agree at every step. Without matplotlib
there is no PNG and the output says so; with it, ``compare.png`` is written.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.compare.compare_runs import DEMO, PLANTED_ARCHITECTURE, env

pytestmark = pytest.mark.slow

_STEPS = ["--steps", "2", "--warmup-steps", "0", "--num-microbatches", "1", "--quiet"]


def _compare(tmp_path: Path, registry: str, *architecture: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "fl_patch", "--registry", registry, "compare", "--baseline", "upstream"]
    command += ["--out", str(out), "--", str(DEMO), *_STEPS, *architecture]
    proc = subprocess.run(command, env=env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    return proc, summary


def test_a_wrong_plugin_parts_from_upstream_and_the_table_names_it(tmp_path: Path) -> None:
    proc, summary = _compare(tmp_path, "compare_wrong.registry", *PLANTED_ARCHITECTURE)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert summary["first_parting_step"] == 2 and "the runs part at step 2" in proc.stdout
    assert summary["baseline"]["exit"] == summary["run"]["exit"] == 0
    assert summary["baseline"]["source"].startswith("observed") and summary["run"]["steps"] == 2
    step1, step2 = summary["steps"]
    assert 0 < step1["loss_rel"] < 1e-3 and step2["loss_rel"] > 1e-2
    differs = {r["target"] for r in summary["calls"] if r["verdict"] == "differs"}
    assert len(differs) == 6 and "megatron.core.optimizer.Adam" in differs
    assert "6 differ, " in proc.stdout
    if importlib.util.find_spec("matplotlib") is None:
        assert "no plot: matplotlib is not installed here" in proc.stdout and summary["plot"] is None
    else:
        assert Path(summary["plot"]).read_bytes().startswith(b"\x89PNG")


def test_an_equivalent_plugin_agrees_with_upstream_at_every_step(tmp_path: Path) -> None:
    proc, summary = _compare(tmp_path, "my_plugin.registry")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert summary["first_parting_step"] is None and "the runs agree at every one of 2 step(s)" in proc.stdout
    assert [row["loss_rel"] for row in summary["steps"]] == [0.0, 0.0]
    assert not [r for r in summary["calls"] if r["verdict"] == "differs"]
