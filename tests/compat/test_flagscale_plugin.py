"""The FlagScale drop-in: an unchanged FlagScale plugin tree, activated by PYTHONPATH + fl_patch.

``examples/flagscale_plugin`` holds ``megatron/plugin/override_registry.py`` (which does
``from megatron.plugin.decorators import register``) and its impls; nothing in it
imports fl_patch. Each test runs a real megatron-core training loop on CPU (gloo)
with ``tests/support/flagscale/fs_train.py`` and checks that each override ran inside it.
The runs with the tree and nothing else set (fp16, fp32, bf16) are one process (``tree_runs``):
the environment fl_patch activates from is the same for all three, and each run builds its model,
optimizer, scheduler and model-parallel state afresh.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env

TREE = REPO / "examples" / "flagscale_plugin"
SCRIPT = REPO / "tests" / "support" / "flagscale" / "fs_train.py"
# 4 steps cover every phase of the seed's WSD curve (warmup 2 steps: step 1; stable: steps 2-3;
# decay from 0.9 * STEPS: step 4) and leave a step before and after an injected inf at step 3.
STEPS = 4
INF_STEP = 3


def _env(tree: bool, **extra: str) -> dict[str, str]:
    env = clean_env(**extra)
    if tree:
        env["PYTHONPATH"] = f"{TREE}{os.pathsep}{env['PYTHONPATH']}"
    return env


def _run(run_python, out: Path, *args: str, env: dict[str, str], ranks: int = 1) -> list[dict]:
    launcher = ["-m", "fl_patch"]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    run_python(*launcher, str(SCRIPT), "--out", str(out), "--steps", str(STEPS), *args, env=env, timeout=600)
    return [json.loads(Path(f"{out}.rank{rank}.json").read_text()) for rank in range(ranks)]


def _python(*args: str, env: dict[str, str], timeout: float) -> None:
    """What the ``run_python`` fixture does, for a module-scoped fixture (``run_python`` is per test)."""
    proc = subprocess.run(
        [sys.executable, *args], env=env, cwd=str(REPO), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"python {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
        f"--- stderr\n{proc.stderr[-6000:]}"
    )


TREE_PRECISIONS = ("fp16", "fp32", "bf16")


@pytest.fixture(scope="module")
def tree_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The tree, nothing else set: one process trains in fp16 (first, as a lone run would), fp32, bf16."""
    out = tmp_path_factory.mktemp("tree_runs") / "tree"
    args = ["--out", str(out), "--steps", str(STEPS), "--precision", ",".join(TREE_PRECISIONS)]
    _python("-m", "fl_patch", str(SCRIPT), *args, env=_env(tree=True), timeout=600)
    return {p: json.loads(Path(f"{out}.{p}.rank0.json").read_text()) for p in TREE_PRECISIONS}


def seed_wsd_lr(step: int, *, max_lr: float = 1e-2, min_lr: float = 1e-4, warmup: int = 2, total: int = STEPS) -> float:
    """The seed's WSDScheduler formula, scaled by max_lr."""
    if step < warmup:
        return max_lr * (step / warmup)
    if step < total * 0.9:
        return max_lr
    decay_progress = (step - total * 0.9) / (total * 0.1)
    return max(min_lr, max_lr * (0.5**decay_progress))


@pytest.mark.slow
def test_two_ranks_two_groups_reduce_norm_and_found_inf_over_both(run_python, tmp_path) -> None:
    inf_step = INF_STEP
    ranks = _run(
        run_python,
        tmp_path / "two",
        "--groups",
        "two",
        "--inject-inf-step",
        str(inf_step),
        env=_env(tree=True),
        ranks=2,
    )
    assert [r["world_size"] for r in ranks] == [2, 2]
    for rank in ranks:
        assert rank["grad_norm_impl"] == "megatron.plugin.optimizer.clip_grads"
        assert rank["unscale_impl"] == "megatron.plugin.optimizer.optimizer"
        # OptimizerParamScheduler(...) built the plugin's class, a subclass of upstream's (the name stays upstream's)
        assert rank["scheduler_mro"][:2] == [
            "megatron.plugin.optimizer_param_scheduler.WSDScheduler",
            "megatron.core.optimizer_param_scheduler.OptimizerParamScheduler",
        ], rank["scheduler_mro"]
        assert rank["isinstance_upstream"]
    for index in range(STEPS):
        per_rank = [r["steps"][index] for r in ranks]
        step = per_rank[0]["step"]
        if step == inf_step:
            # Only rank 0 saw an inf; the MAX over the groups made both ranks skip the step.
            assert all(s["found_inf"] and s["params_unchanged"] for s in per_rank)
            assert all(s["grad_norm"] is None for s in per_rank)
            assert (
                per_rank[0]["loss_scale"] == per_rank[1]["loss_scale"] == ranks[0]["steps"][index - 1]["loss_scale"] / 2
            )
            continue
        assert not any(s["found_inf"] for s in per_rank)
        # Hand computation: sum of p-th powers over ranks (first group), again over the
        # second group (which spans the same ranks), then the p-th root.
        expected = math.sqrt(2 * sum(s["local_sq"] for s in per_rank))
        for s in per_rank:
            assert s["grad_norm"] == pytest.approx(expected, rel=1e-5), (step, s["grad_norm"], expected)
    # The learning-rate curve is the seed's formula, step by step, on every rank.
    for rank in ranks:
        assert [s["lr"] for s in rank["steps"]] == pytest.approx([seed_wsd_lr(s["step"]) for s in rank["steps"]])


@pytest.mark.slow
def test_one_group_equals_upstream_bit_for_bit(run_python, tmp_path) -> None:
    # The scheduler replacement changes the learning rate on purpose; keep it out of
    # this comparison (FL_PATCH_DISABLE takes the method key).
    plugin = _run(
        run_python,
        tmp_path / "plugin",
        "--inject-inf-step",
        str(INF_STEP),
        env=_env(tree=True, FL_PATCH_DISABLE="optimizer_param_scheduler.OptimizerParamScheduler"),
    )[0]
    upstream = _run(run_python, tmp_path / "upstream", "--inject-inf-step", str(INF_STEP), env=_env(tree=False))[0]
    assert plugin["grad_norm_impl"] == "megatron.plugin.optimizer.clip_grads"
    assert upstream["grad_norm_impl"] == "megatron.core.optimizer.clip_grads"
    assert upstream["unscale_impl"] == "megatron.core.optimizer.optimizer"
    keys = ("loss", "grad_norm", "found_inf", "params_unchanged", "lr", "loss_scale")
    assert [[s[k] for k in keys] for s in plugin["steps"]] == [[s[k] for k in keys] for s in upstream["steps"]]
    assert plugin["steps"][INF_STEP - 1]["found_inf"]  # the inf step was skipped the same way by both


@pytest.mark.slow
def test_vendor_switch_changes_which_impl_runs(run_python, tmp_path, tree_runs: dict[str, dict]) -> None:
    musa = _run(run_python, tmp_path / "musa", env=_env(tree=True, MG_FL_PREFER="musa"))[0]
    assert musa["plugin_calls"]["musa"] == STEPS  # get_grad_norm_fp32_musa ran at every step
    default = tree_runs["fp16"]  # the same run without MG_FL_PREFER
    assert default["plugin_calls"]["musa"] == 0
    # Both norms are the norm of the same first-step gradients (fp64 vs fp32 accumulation).
    assert musa["steps"][1]["grad_norm"] == pytest.approx(default["steps"][1]["grad_norm"], rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_plugin_trains_without_a_grad_scaler(tree_runs: dict[str, dict], precision: str) -> None:
    # fp32 and bf16 without loss scaling have no found_inf tensor: the plugin's
    # has_grad_norm_group must not look for one (it did: AttributeError on the first step; each
    # run builds its own optimizer, so the fp16 run before it in tree_runs cannot lend it one).
    rank = tree_runs[precision]
    assert rank["grad_norm_impl"] == "megatron.plugin.optimizer.clip_grads"
    assert {s["has_grad_norm_group_impl"] for s in rank["steps"]} == {"megatron.plugin.optimizer.optimizer"}
    assert not any(s["found_inf"] for s in rank["steps"])
    # Every step taken with a learning rate above zero updated the parameters ("lr" is recorded
    # after the scheduler stepped: the rate the next step uses).
    in_effect = [None, *(s["lr"] for s in rank["steps"][:-1])]
    updated = [not s["params_unchanged"] for s, lr in zip(rank["steps"], in_effect, strict=True) if lr]
    assert updated and all(updated)


def test_list_shows_the_tree_without_importing_megatron(run_python) -> None:
    proc = run_python("-m", "fl_patch", "--list", "--json", env=_env(tree=True))
    records = json.loads(proc.stdout)
    rows = {(r["target"], r["vendor"]): r for r in (records["registrations"] if isinstance(records, dict) else records)}
    key = ("megatron.core.optimizer.clip_grads.get_grad_norm_fp32", "musa")
    assert key in rows
    assert ("megatron.core.optimizer_param_scheduler.OptimizerParamScheduler", "default") in rows
