"""``bench/fp8_op_table.py``: the fp8 linears of megatron's TE-spec GPT, call by call, within the fp8 tests' bounds;
an fp8 path whose scale is wrong is over them (the table can fail)."""

from __future__ import annotations

import json

from ..conftest import REPO, clean_env

# One process (megatron imported once): the table as it is, then with every per-tensor decode scale 25% too large.
SCRIPT = """
import json, runpy, sys
out = sys.argv[1]
bench = runpy.run_path("bench/fp8_op_table.py", run_name="fp8_op_table")
codes = [bench["main"](["--json", out + "/right.json", "--layers", "1"])]
from fl_patch.impls.flaggems import fp8_quant as fq
right = fq.quantize_tensorwise

def wrong(*args, **kwargs):
    q, qt = right(*args, **kwargs)
    (q or qt).scale_inv.mul_(1.25)  # (q and qt share one scale tensor)
    return q, qt

fq.quantize_tensorwise = wrong
codes.append(bench["main"](["--json", out + "/wrong.json", "--layers", "1"]))
print(json.dumps(codes))
"""


def test_the_fp8_table_is_within_the_bounds_and_flags_a_wrong_scale(run_python, tmp_path) -> None:
    env = clean_env(MG_FL_PREFER="flaggems")
    proc = run_python("-m", "fl_patch", "-c", SCRIPT, str(tmp_path), env=env, check=False, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, 1], proc.stdout[-3000:]
    right = json.loads((tmp_path / "right.json").read_text())
    wrong = json.loads((tmp_path / "wrong.json").read_text())
    names = [row["linear"] for row in right["rows"]]
    assert len(names) == 4 and all(".layers.0." in n for n in names), names  # qkv, proj, fc1, fc2 of the one layer
    assert right["within"] is True and all(row["same_as_the_call"] is True for row in right["rows"]), right
    for row in right["rows"]:  # fp8's error is fp8's (3.7-6%), far above bf16's own (about 0.2%)
        assert all(
            0.01 < row[g]["fp8"] <= right["bounds"][g] and row[g]["bf16"] < 0.005 for g in ("forward", "dgrad")
        ), row
    assert wrong["within"] is False
    assert all(row["forward"]["within"] is False for row in wrong["rows"]), wrong["rows"]
