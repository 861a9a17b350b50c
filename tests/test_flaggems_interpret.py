"""The FlagGems pack's own Triton kernels on a CPU, in Triton's interpreter (``TRITON_INTERPRET=1``).

Triton is not in the project's venv (with it importable, megatron-core and torch
take their Triton paths in every test). ``scripts/triton-cpu.sh`` installs it into
``.cache/triton-cpu``; these tests put that folder on the PYTHONPATH of a
subprocess and skip when it is absent. Small sizes: the interpreter runs each
program in numpy (about 30 s for all three tests on 2 cores).
"""

from __future__ import annotations

import json
import os

import pytest

from .conftest import REPO, SUPPORT, clean_env

TRITON_CPU = REPO / ".cache" / "triton-cpu"

pytestmark = pytest.mark.skipif(
    not (TRITON_CPU / "triton").is_dir(), reason="no .cache/triton-cpu (run scripts/triton-cpu.sh)"
)


def _env(**extra: str) -> dict[str, str]:
    pythonpath = os.pathsep.join([str(TRITON_CPU), str(REPO), str(SUPPORT)])
    return clean_env(PYTHONPATH=pythonpath, TRITON_INTERPRET="1", PYTHONWARNINGS="ignore", **extra)


def _results(stdout: str) -> tuple[list[dict], dict]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [r for r in lines if "id" in r], lines[-1]


def _failures(cases: list[dict]) -> list[str]:
    return [f"{c['id']}: {c['problems']}" for c in cases if c["problems"]]


def test_every_kernel_forward_and_backward_against_torch_autograd(run_python) -> None:
    proc = run_python(str(SUPPORT / "gems_checks.py"), "interpret", env=_env(), check=False, timeout=300)
    cases, summary = _results(proc.stdout)
    assert proc.returncode == 0 and not _failures(cases), _failures(cases) or proc.stderr[-3000:]
    ops = {c["id"].split("[")[0] for c in cases}
    assert ops == {"rms_norm", "layer_norm", "swiglu", "rope", "qkv_rope", "attention", "softmax", "cross_entropy"}
    assert summary == {"cases": len(cases), "failed": 0} and len(cases) == 33


@pytest.mark.parametrize(
    "blocks",
    [
        {"fwd": [16, 16, 4, 1], "dq": [16, 16, 4, 1], "dkdv": [16, 16, 4, 1]},  # BLOCK_M == BLOCK_N everywhere
        {"fwd": [64, 16, 4, 1], "dq": [64, 32, 4, 1], "dkdv": [16, 64, 4, 1]},  # wide ratios, blocks past the sequence
    ],
    ids=["square-blocks", "wide-blocks"],
)
def test_attention_with_other_block_shapes(run_python, blocks) -> None:
    proc = run_python(str(SUPPORT / "gems_checks.py"), "interpret", json.dumps(blocks), env=_env(), check=False)
    cases, _ = _results(proc.stdout)
    assert proc.returncode == 0 and len(cases) == 4 and not _failures(cases), _failures(cases) or proc.stderr[-3000:]


def test_pack_inside_real_megatron_core(run_python) -> None:
    """Every target applied; impls equal upstream (or float64) forward and backward; fallback said once."""
    proc = run_python(
        str(SUPPORT / "gems_megatron_interpret.py"),
        env=_env(MG_FL_PREFER="flaggems", GEMS_PORT=str(29500 + os.getpid() % 400)),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] and len(result["targets"]) == 10


_REDUCE_SNIPPET = """
import json, torch
from fl_patch.impls.flaggems.kernels.norms import _reduce_parts
torch.manual_seed(0)
out = []
for parts, width, used in ((1500, 37, 1500), (528, 70, 300), (3, 5, 1)):
    a = torch.randn(parts, width)
    b = torch.randn(parts, width)
    dw, db = _reduce_parts(a, used, torch.bfloat16, b)
    (dw_only, none) = _reduce_parts(a, used, torch.float32)
    ref_a, ref_b = a[:used].double().sum(0), b[:used].double().sum(0)
    # fp32 summation error bound of a tree (within a load) plus a few trips: (log2(1024) + 6) eps sum|a|
    bound = (16 * 2.0**-24 * a[:used].double().abs().sum(0))
    out.append({
        "dw": (dw.double() - ref_a).abs().max().item() / ref_a.abs().max().item(),
        "db": (db.double() - ref_b).abs().max().item() / ref_b.abs().max().item(),
        "fp32_over_bound": ((dw_only.double() - ref_a).abs() / bound).max().item(),
        "dtype": str(dw.dtype), "none": none is None,
    })
print(json.dumps(out))
"""


def test_norm_weight_gradient_reduction_over_many_partial_rows(run_python) -> None:
    # More partial rows than one load holds (1500 > 1024: two trips), fewer rows used
    # than allocated, a width that is no multiple of the column block, dw and db in one launch.
    proc = run_python("-c", _REDUCE_SNIPPET, env=_env(), check=False, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 3
    for r in results:
        assert r["dtype"] == "torch.bfloat16" and r["none"]
        # bf16 rounding of the sum: under 2**-7 relative (triton 3.6's interpreter truncates fp32 to
        # bf16, seen here: 1 + 2**-8 + 2**-12 became 1.0; torch and the GPU round to nearest)
        assert r["dw"] < 8e-3 and r["db"] < 8e-3
        assert r["fp32_over_bound"] <= 1.0


_FOLD_SNIPPET = """
import json, torch, triton
from fl_patch.impls.flaggems.kernels import norms
torch.manual_seed(0)
out = []
for kind, programs, fan_in, m, n in (
    ("rms", 1, 2, 5, 24), ("rms", 3, 2, 7, 24), ("rms", 17, 4, 40, 37), ("rms", 40, 2, 81, 16),
    ("rms", 130, 16, 260, 8), ("ln", 37, 2, 74, 20), ("ln", 9, 8, 9, 33),
):
    x = torch.randn(m, n)
    w = torch.randn(n)
    b = torch.randn(n)
    dy = torch.randn(m, n)
    ref_x = x.double().requires_grad_()
    ref_w = w.double().requires_grad_()
    ref_b = b.double().requires_grad_()
    if kind == "rms":
        y = ref_x * torch.rsqrt(ref_x.pow(2).mean(-1, keepdim=True) + 1e-5) * ref_w
        rstd = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-5).float()
    else:
        y = torch.nn.functional.layer_norm(ref_x, (n,), ref_w, ref_b, 1e-5)
        mean = x.double().mean(-1)
        rstd = torch.rsqrt(x.double().var(-1, unbiased=False) + 1e-5).float()
    y.backward(dy.double())
    block_n = triton.next_power_of_2(n)
    counters = torch.zeros(2 * (programs + 16), dtype=torch.int32)
    results = {}
    for fold in (True, False):
        runs = []
        for _ in range(2):  # a backward rerun (as the autotuner does) finds its counters at zero again
            dx = torch.empty(m, n)
            part = torch.full((2 * programs + 16, n), float("nan"))
            db_part = torch.full((2 * programs + 16, n), float("nan"))
            dw, db = torch.empty(n), torch.empty(n)
            meta = dict(BLOCK_M=1, BLOCK_N=block_n, PPS=1, FOLD=fold, FAN_IN=fan_in, num_warps=1)
            if kind == "rms":
                norms._rms_bwd[(programs,)](x, w, dy, dx, rstd, part, dw, counters, m, n, n, n, n, 1, **meta)
                if not fold:
                    dw, _ = norms._reduce_parts(part, programs, torch.float32)
            else:
                norms._ln_bwd[(programs,)](x, w, dy, dx, mean.float(), rstd, part, db_part, dw, db, counters,
                                           counters[programs + 16:], m, n, n, n, n, 1, HAS_BIAS=True, **meta)
                if not fold:
                    dw, db = norms._reduce_parts(part, programs, torch.float32, db_part)
            runs.append((dx.clone(), dw.clone(), db.clone() if kind == "ln" else None))
        results[fold] = runs
    (dx, dw, db), (dx2, dw2, db2) = results[True]
    _, dw_sep, db_sep = results[False][0]
    scale = ref_w.grad.abs().max().item()
    out.append({
        "case": f"{kind}-P{programs}-F{fan_in}",
        "dx": (dx.double() - ref_x.grad).abs().max().item() / ref_x.grad.abs().max().item(),
        "dw": (dw.double() - ref_w.grad).abs().max().item() / scale,
        "dw_vs_separate": (dw - dw_sep).abs().max().item() / scale,
        "db": (db.double() - ref_b.grad).abs().max().item() / ref_b.grad.abs().max().item() if db is not None else 0.0,
        "db_vs_separate": (db - db_sep).abs().max().item() if db is not None else 0.0,
        "rerun_identical": torch.equal(dw, dw2) and torch.equal(dx, dx2) and (db is None or torch.equal(db, db2)),
        "counters_zero": int(counters.abs().sum()) == 0,
    })
print(json.dumps(out))
"""


def test_norm_backward_folds_partial_sums_in_its_own_launch(run_python) -> None:
    # The in-launch tree: one level (1 and 3 programs), several (17 programs in groups of 4: 17 -> 5 -> 2 -> 1;
    # 40 in pairs: six levels), a wide fan-in (130 -> 9 -> 1), LayerNorm's dw and db on separate counters.
    # Partial rows start as NaN, so a row the tree reads before (or without) its writer shows up.
    proc = run_python("-c", _FOLD_SNIPPET, env=_env(), check=False, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 7
    for r in results:
        assert r["dx"] < 1e-5 and r["dw"] < 1e-5 and r["db"] < 1e-5, r
        assert r["dw_vs_separate"] < 1e-5 and r["db_vs_separate"] < 1e-4, r
        assert r["rerun_identical"] and r["counters_zero"], r
