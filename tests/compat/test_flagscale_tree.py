"""An unchanged FlagScale tree that ships its own ``megatron/plugin/decorators.py`` (fl_patch.compat.flagscale.tree).

``tests/support/flagscale/fs_tree`` is laid out as FlagScale's Megatron-LM-FL ``megatron/plugin/``
is: a package ``__init__`` that imports ``override_registry`` first, FlagScale's own registry
module (``decorators.py``, written here to behave as FlagScale's does), a platform registry
that prints at import, impls that call ``Target.__wrapped__``, a staticmethod named in
FlagScale's key form, an Ascend impl that needs ``torch_npu``, and a renamed target. The
targets are real megatron-core 0.19.2 objects; the programs run under ``python -m fl_patch``.
``bench/flagscale_tree.py`` runs FlagScale's own tests on the real tree the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env, support_pythonpath

TREE = REPO / "tests" / "support" / "flagscale" / "fs_tree"
REGISTRY_FILE = TREE / "megatron" / "plugin" / "override_registry.py"
FILESYSTEM_ASYNC = "megatron.core.dist_checkpointing.strategies.filesystem_async"

PROGRAM = """
import inspect, json, os, sys, torch, fl_patch
import torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
from megatron.core.optimizer import clip_grads
from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync as W
from megatron.core.tensor_parallel import random as tp_random
from megatron.plugin import decorators
from megatron.plugin.kunlunxin import filesystem_async as tree_fa
from megatron.plugin.optimizer import clip_grads as tree_clip
def code_module(function):  # the module whose code runs (an installed function wears upstream's names)
    if function.__code__.co_name == "counted":  # --report's counter (fl_patch.reporting.exit_report) calls the impl
        function = inspect.getclosurevars(function).nonlocals["impl"]
    return next(n for n, m in list(sys.modules.items()) if getattr(m, "__file__", None) == function.__code__.co_filename)
TREE_TARGETS = {r.target for r in fl_patch.report() if r.source == "megatron.plugin.override_registry"}
norm = float(clip_grads.get_grad_norm_fp32([torch.tensor([3.0, 4.0])]))
kunlunxin = W.preload_tensors.__code__.co_filename.endswith("megatron/plugin/kunlunxin/filesystem_async.py")
preloaded = W.preload_tensors([("f", "k", ([], [(1, torch.ones(2))]))]) if kunlunxin else None
print("RESULT" + json.dumps({
    "norm": norm,
    "norm_impl": code_module(clip_grads.get_grad_norm_fp32),
    "tree_calls": tree_clip.CALLS + tree_fa.CALLS,
    "preloaded": [[f, k, len(t)] for f, k, (_, t) in preloaded] if preloaded is not None else None,
    "preload_wrapped_is_upstream": kunlunxin and W.preload_tensors.__wrapped__ is fl_patch.original(
        "megatron.core.dist_checkpointing.strategies.filesystem_async.preload_tensors"),
    "rng_impl": code_module(tp_random._set_cuda_rng_state),
    "tree_lazy_keys": sorted(decorators._lazy_registry),
    "records": [[r.target.rsplit(".", 1)[-1], r.vendor, r.status.value, r.detail]
                for r in fl_patch.report() if r.target in TREE_TARGETS],
}))
"""


def _env(**variables: str) -> dict[str, str]:
    return clean_env(PYTHONPATH=support_pythonpath(TREE), FL_PATCH_CHILDREN="0", **variables)


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, cwd=str(cwd), capture_output=True, text=True, timeout=300)


def _result(proc: subprocess.CompletedProcess[str]) -> dict:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert proc.returncode == 0 and len(lines) == 1, (
        f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )
    return json.loads(lines[0][len("RESULT") :])


def _records(result: dict) -> dict[tuple[str, str], tuple[str, str]]:
    return {(name, vendor): (status, detail) for name, vendor, status, detail in result["records"]}


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    return path


def test_the_trees_own_register_reaches_fl_patch_and_its_registry_keeps_working(program: Path, tmp_path: Path) -> None:
    # (wide enough that the report's rows are not wrapped: the test reads them by column)
    proc = _run(["-m", "fl_patch", "--report", str(program)], _env(COLUMNS="200"), tmp_path)
    result = _result(proc)
    records = _records(result)
    # The tree's default impl runs, reaches upstream through __wrapped__ (also under --report).
    assert result["norm_impl"] == "megatron.plugin.optimizer.clip_grads" and result["norm"] == 5.0
    assert result["tree_calls"] == ["get_grad_norm_fp32"]
    assert records[("get_grad_norm_fp32", "default")][0] == "applied"
    # The tree's own registry saw every call too: its internal API is untouched.
    assert result["tree_lazy_keys"] == [
        "FileSystemWriterAsync.prepare_write_data",
        "clip_grads.get_grad_norm_fp32",
        "filesystem_async.preload_tensors",
        "multi_token_prediction.reduce_loss_in_tracker",
        "random._set_cuda_rng_state",
    ]
    # The CPU machine's vendor list: the tree's platform says cpu; the CPU pack's RNG impl runs.
    assert result["rng_impl"] == "fl_patch.impls.cpu.rng"
    assert "Megatron-LM-FL Platform: cpu Selected" not in proc.stdout  # the tree's prints go to stderr
    # --report counted the one call through the patch (its wrapper's __wrapped__ is upstream's,
    # so the impl's call through __wrapped__ does not recurse).
    lines = proc.stderr.splitlines()
    (at,) = [i for i, line in enumerate(lines) if "-> megatron.plugin.optimizer.clip_grads" in line]
    row = lines[at - 1].split()  # status calls vendor target, the impl on the line below
    assert row[0] == "applied" and row[3] == "megatron.core.optimizer.clip_grads.get_grad_norm_fp32"
    assert row[1] == "1" and "RecursionError" not in proc.stderr


def test_xpu_means_kunlunxin_through_the_trees_platform_and_key_form_and_wrapped_work(
    program: Path, tmp_path: Path
) -> None:
    result = _result(_run(["-m", "fl_patch", "--report", str(program)], _env(XPU="1"), tmp_path))
    records = _records(result)
    status, detail = records[("preload_tensors", "kunlunxin")]
    assert status == "applied" and "FlagScale's key form: resolves to FileSystemWriterAsync.preload_tensors" in detail
    assert records[("prepare_write_data", "kunlunxin")][0] == "applied"
    # The kunlunxin impl called upstream's staticmethod through __wrapped__ (non_blocking=False).
    assert result["tree_calls"] == ["get_grad_norm_fp32", "preload_tensors"]
    assert result["preloaded"] == [["f", "k", 1]] and result["preload_wrapped_is_upstream"]


def test_a_vendor_impl_that_cannot_load_gives_way_to_the_next_vendor_said_once(program: Path, tmp_path: Path) -> None:
    proc = _run(["-m", "fl_patch", str(program)], _env(MG_FL_PREFER="npu"), tmp_path)
    result = _result(proc)
    assert result["rng_impl"] == "fl_patch.impls.cpu.rng"
    records = _records(result)
    assert records[("_set_cuda_rng_state", "npu")] == (
        "impl failed",
        "ModuleNotFoundError: No module named 'torch_npu'",
    )
    assert records[("_set_cuda_rng_state", "cpu")][0] == "applied"
    said = [line for line in proc.stderr.splitlines() if "torch_npu" in line and "FlPatchWarning" in line]
    assert len(said) == 1 and "trying vendor 'cpu' (fl_patch.impls.cpu.rng.set_cuda_rng_state) instead" in said[0]
    assert said[0].startswith(f"{REGISTRY_FILE}:")  # the register() line of the tree


def test_list_and_check_json_are_pure_json_and_say_why_targets_are_missing(tmp_path: Path) -> None:
    listed = _run(["-m", "fl_patch", "--list", "--json"], _env(), tmp_path)
    tree = [r for r in json.loads(listed.stdout)["registrations"] if r["source"] == "megatron.plugin.override_registry"]
    assert len(tree) == 5, listed.stderr[-2000:]
    checked = _run(["-m", "fl_patch", "--check", "--json"], _env(XPU="1"), tmp_path)
    report = json.loads(checked.stdout)  # the tree printed "Platform ... Registered" meanwhile: on stderr
    assert "Megatron-LM-FL Platform: kunlunxin Selected" in checked.stderr
    assert report["vendors"][:2] == ["kunlunxin", "cpu"]
    by_target = {(r["target"].rsplit(".", 1)[-1], r["vendor"]): r for r in report["registrations"]}
    renamed = " ".join(f["message"] for f in by_target[("reduce_loss_in_tracker", "kunlunxin")]["findings"])
    assert "renamed? close names there: MTPLossLoggingHelper.reduce_metrics_in_tracker" in renamed
    key_form = by_target[("preload_tensors", "kunlunxin")]
    assert key_form["target_found"] and key_form["level"] == "warning"
    assert checked.returncode == 1  # the renamed target is an error


def test_the_trees_internal_api_passes_its_own_checks_under_fl_patch(tmp_path: Path) -> None:
    checks = TREE / "megatron" / "plugin" / "check_registry_api.py"
    # -o addopts=: this repo's pytest options are not the tree's; their `-n auto` would start xdist
    # workers (each a second interpreter importing megatron) for four checks the launched one runs.
    pytest_args = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", str(checks)]
    proc = _run(["-m", "fl_patch", "-m", "pytest", *pytest_args], _env(), TREE)
    assert proc.returncode == 0 and "4 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_a_tree_imported_before_installation_still_reaches_fl_patch(tmp_path: Path) -> None:
    code = (
        "import json, fl_patch\n"
        "import megatron.plugin\n"  # the tree's registry ran before fl_patch was there
        "fl_patch.install()\n"
        "print('RESULT' + json.dumps(sorted({r.target.rsplit('.', 1)[-1] for r in fl_patch.report()"
        " if r.source == 'megatron.plugin.override_registry'})))\n"
    )
    env = _env()
    proc = _run(["-c", code], env, tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, proc.stderr[-3000:]
    assert json.loads(lines[0][len("RESULT") :]) == [
        "_set_cuda_rng_state",
        "get_grad_norm_fp32",
        "preload_tensors",
        "prepare_write_data",
        "reduce_loss_in_tracker",
    ]


def test_a_tree_whose_megatron_is_a_regular_package_gets_one_clear_message(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    plugin = tree / "megatron" / "plugin"
    plugin.mkdir(parents=True)
    (tree / "megatron" / "__init__.py").write_text("")
    (plugin / "__init__.py").write_text("")
    (plugin / "override_registry.py").write_text("")
    env = clean_env(PYTHONPATH=os.pathsep.join([str(tree), support_pythonpath()]), FL_PATCH_PACKS="none")
    proc = _run(["-m", "fl_patch", "--list"], env, tmp_path)
    said = [line for line in proc.stderr.splitlines() if "regular package" in line]
    assert len(said) == 1 and str(tree / "megatron" / "__init__.py") in said[0], proc.stderr[-2000:]


SIDE_TREE = REPO / "tests" / "support" / "flagscale" / "fs_side"
SIDE_SOURCE = "megatron.plugin_flagscale.override_registry"


def test_flagscales_own_side_tree_is_found_and_checked_on_this_release(tmp_path: Path) -> None:
    """FlagScale's FlagScale-side tree (``megatron/plugin_flagscale/override_registry.py``, targets in
    megatron.training, registered through ``megatron.plugin.decorators``, which fl_patch serves here:
    this tree has no ``megatron/plugin``) loads like the Megatron-LM-FL tree; its key-form target
    ``initialize.initialize._compile_dependencies`` resolves to the module's function."""
    env = clean_env(PYTHONPATH=support_pythonpath(SIDE_TREE), FL_PATCH_CHILDREN="0", MG_FL_PREFER="npu")
    listed = _run(["-m", "fl_patch", "--list", "--json"], env, tmp_path)
    side = [r for r in json.loads(listed.stdout)["registrations"] if r["source"] == SIDE_SOURCE]
    assert len(side) == 4, listed.stdout[-2000:] + listed.stderr[-2000:]
    checked = _run(["-m", "fl_patch", "--check", "--json"], env, tmp_path)
    report = json.loads(checked.stdout)
    mine = {
        (r["target"], r["vendor"]): r for r in report["registrations"] if r["target"].startswith("megatron.training")
    }
    key_form = mine[("megatron.training.initialize.initialize._compile_dependencies", "npu")]
    assert key_form["target_found"], key_form
    assert "FlagScale's key form" in json.dumps(key_form)
    for target in (
        "megatron.training.dist_signal_handler.get_device",
        "megatron.training.utils.get_device_arch_version",
    ):
        assert mine[(target, "npu")]["target_found"], mine[(target, "npu")]
