"""TE's fused MoE functions without TE (``fl_patch/impls/te/moe_fusions.py``): ``--moe-permute-fusion`` and
``--moe-router-fusion`` on real megatron-core, against megatron's own unfused code, and end to end.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env
from ..scenarios.test_train_gpt import losses, train
from ..support.ports import free_port

PROBE = REPO / "tests" / "support" / "moe_fusions" / "probe.py"
# Bound to None without TE and left so: megatron takes the first only when it is not None (else
# fused_permute_with_probs, which fl_patch serves), and uses te_general_gemm outside the HAVE_TE guards.
LEFT_NONE = {"fused_permute_and_pad_with_probs", "te_general_gemm"}


def _moe_utils_source() -> ast.Module:
    root = Path(importlib.util.find_spec("megatron").submodule_search_locations[0])  # type: ignore[index]
    return ast.parse((root / "core" / "transformer" / "moe" / "moe_utils.py").read_text())


def _guard_of(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> ast.AST | None:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If | ast.BoolOp):
            return node
    return None


def test_have_te_in_moe_utils_guards_only_the_fused_functions() -> None:
    """fl_patch sets ``HAVE_TE = True`` in ``moe_utils`` alone: that is right only while every use of the name
    there is the TE import block or ``not HAVE_TE or fused_x is None`` in front of a fused function it provides.
    Re-read from the installed megatron-core, so a new use of the name is noticed."""
    from fl_patch.impls.te import moe_fusions
    from fl_patch.impls.te.registry import TE_MOE_FUSIONS

    tree = _moe_utils_source()
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "HAVE_TE"]
    assert uses, "moe_utils no longer reads HAVE_TE: the registration is stale"
    provided = set(TE_MOE_FUSIONS) - {"HAVE_TE"}
    for use in uses:
        guard = _guard_of(use, parents)
        if isinstance(guard, ast.If) and guard.test is use:  # `if HAVE_TE: from ...transformer_engine import ...`
            imported = {a.name for s in guard.body if isinstance(s, ast.ImportFrom) for a in s.names}
            assert imported, ast.unparse(guard)[:200]
            continue
        assert isinstance(guard, ast.BoolOp) and isinstance(guard.op, ast.Or), (use.lineno, ast.unparse(guard))
        checked = {
            sub.left.id
            for sub in ast.walk(guard)
            if isinstance(sub, ast.Compare) and isinstance(sub.left, ast.Name) and isinstance(sub.ops[0], ast.Is)
        }
        assert checked & provided and checked <= provided | LEFT_NONE, (use.lineno, checked)  # fl_patch serves these
    assert all(callable(getattr(moe_fusions, name)) for name in provided)


@pytest.mark.slow
def test_fused_moe_functions_equal_megatrons_unfused_code() -> None:
    """Generated routings (top-k, dropped tokens, truncation, drop-and-pad capacity maps), fp32 and bf16:
    permute / unpermute / sort_chunks with ``fused=True`` give megatron's ``fused=False`` results, forward and
    backward; the fused router equals the unfused; the indices->multihot converter equals a loop; a MoE GPT trains identically with both flags on and off."""
    env = clean_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", str(PROBE)], env=env, cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["have_te_in_moe_utils"] is True and all(r["fused_names_bound"].values()), r["fused_names_bound"]
    for dtype in ("fp32", "bf16"):
        seen = r[dtype]
        assert seen["cases"] >= 60, seen
        # row movement is exact: the same rows, the same probabilities, in the same order
        for key in ("permute", "permuted_probs", "truncated", "drop_and_pad"):
            assert seen[key] == 0.0, (dtype, key, seen)
        # sums: the same maths; fl_patch's fp32 sum is never farther from float64 than megatron's
        assert seen["unpermute_excess_error"] <= 1e-7, (dtype, seen)
        for key in ("permute_grad_x", "permute_grad_probs", "unpermute_grad", "unpermute_grad_probs"):
            assert seen[key] <= 1e-6, (dtype, key, seen)
    chunks = r["sort_chunks"]
    assert chunks["cases"] >= 100 and chunks["sort_chunks"] == chunks["sort_chunks_probs"] == 0.0, chunks
    assert chunks["sort_chunks_grad"] == 0.0, chunks
    assert all(r["router"].values()), r["router"]
    # megatron's Triton indices->multihot converter (no working fallback without Triton): fl_patch's torch form
    multihot = r["multihot"]
    assert multihot["patched"] and multihot["dispatcher_bound"], multihot
    assert multihot["cases"] >= 50 and multihot["multihot"] == 0 and multihot["probs"] == multihot["grad"] == 0.0, (
        multihot
    )
    assert set(r["trained"]) == {"alltoall_sequential", "alltoall_grouped", "allgather_sequential", "allgather_grouped"}
    for name, run in r["trained"].items():
        assert run["max_diff"] <= 1e-6 and run["on"][-1] < run["on"][0], (name, run)


@pytest.mark.slow
def test_expert_parallel_training_with_the_fusions_matches_without(tmp_path: Path) -> None:
    """EP=2 under torchrun (gloo), 4 experts top-2 alltoall: two experts a rank, so the exchange's per-expert
    chunk sorting runs too; ``--moe-fusion`` (megatron's moe_permute_fusion and moe_router_fusion) gives the
    losses of the unfused run."""
    common = ("--steps", "4", "--spec", "te", "--experts", "4", "--ep", "2", "--dropout", "0", "--quiet")
    fused, _ = train(tmp_path, "fused", *common, "--moe-fusion", ranks=2)
    plain, _ = train(tmp_path, "plain", *common, ranks=2)
    assert len(losses(fused)) == 4
    assert max(abs(a - b) for a, b in zip(losses(fused), losses(plain), strict=True)) <= 1e-6, (fused, plain)
