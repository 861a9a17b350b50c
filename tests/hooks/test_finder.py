"""The import hook (fl_patch.hooks): when patches happen, laziness, threads, re-entry."""

from __future__ import annotations

import importlib
import json
import sys
import threading

import pytest

import fl_patch
from fl_patch import Status
from fl_patch.hooks import PatchingFinder

from ..conftest import clean_env, fresh_modules


def test_unwatched_imports_are_declined_at_once(engine) -> None:
    fl_patch.register("megatron.core.optimizer.clip_grads.get_grad_norm_fp32", "x.y")
    finder = PatchingFinder(engine)
    for name in ("json", "torch", "megatron.core.optimizer.optimizer", "megatron.corex"):
        assert finder.find_spec(name) is None
    assert engine.watches("megatron.core.optimizer.clip_grads")
    assert engine.watches("megatron.core.optimizer")  # a package that may own the target


PROBE = """
import json, sys
import fl_patch
fl_patch.install()
import megatron.core
from megatron.core.optimizer import clip_grads, optimizer
import fltest_lazy.impls as impls
out = {
    "impl_saw_target_module": impls.SEEN_TARGET_MODULE,
    "impl_saw_initializing_module": impls.SEEN_INITIALIZING,
    "impl_saw_upstream_function": impls.SEEN_UPSTREAM,
    "patched": clip_grads.get_grad_norm_fp32.__code__ is impls.get_grad_norm_fp32.__code__,
    "alias_patched": optimizer.get_grad_norm_fp32.__code__ is impls.get_grad_norm_fp32.__code__,
    "never_imported": "fltest_lazy.never" not in sys.modules,
    "stub": sys.modules["megatron.core.transformer.moe.ops.paged_stash"].__name__,
    "report": [r.as_dict() for r in fl_patch.report()],
}
print("RESULT" + json.dumps(out))
"""


def _result(stdout: str) -> dict:
    (line,) = [line for line in stdout.splitlines() if line.startswith("RESULT")]
    return json.loads(line[len("RESULT") :])


def test_patches_land_before_the_importer_gets_the_module_and_impls_load_lazily(run_python) -> None:
    env = clean_env(FL_PATCH_PACKS="none", FL_PATCH_REGISTRY="fltest_lazy.registry")
    out = _result(run_python("-c", PROBE, env=env).stdout)
    assert out["impl_saw_target_module"] and out["impl_saw_upstream_function"]
    assert out["impl_saw_initializing_module"]  # imported inside the hook, right after the body ran
    assert out["patched"] and out["alias_patched"]
    assert out["never_imported"]
    # The whole module was replaced before its first import (upstream's imports triton).
    assert out["stub"] == "fl_patch.impls.cpu.paged_stash_ops"
    by_target = {r["target"]: r for r in out["report"]}
    assert by_target["megatron.core.transformer.moe.ops.paged_stash"]["status"] == "applied"
    assert by_target["megatron.core.transformer.moe.ops.paged_stash"]["detail"] == "replaced before its first import"
    assert by_target["megatron.core.optimizer.clip_grads.get_grad_norm_fp32"]["late"] is False
    assert by_target["megatron.core.post_training.modelopt.layers.Linear"]["status"] == "waiting"


def test_without_fl_patch_upstream_megatron_core_does_not_import_here(run_python) -> None:
    """The premise of the whole-module replacement above (a CPU-only torch has no triton)."""
    proc = run_python("-c", "import megatron.core", env=clean_env(), check=False)
    if proc.returncode == 0:
        pytest.skip("triton is installed here: upstream megatron.core imports without the stand-in")
    assert "No module named 'triton'" in proc.stderr


def test_fl_patch_0_turns_everything_off(run_python) -> None:
    env = clean_env(FL_PATCH="0", FL_PATCH_REGISTRY="fltest_lazy.registry")
    code = "import sys, fl_patch; print(fl_patch.install(), any('fltest' in m for m in sys.modules), fl_patch.report())"
    assert run_python("-c", code, env=env).stdout.split() == ["False", "False", "[]"]


def test_activation_after_import_patches_what_is_loaded_and_says_so(run_python) -> None:
    code = """
import json
import fl_patch
fl_patch.register("megatron.core.transformer.moe.ops.paged_stash", "fl_patch.impls.cpu.paged_stash_ops")
fl_patch.install()
import megatron.core.optimizer.clip_grads as clip_grads
import megatron.core.optimizer.optimizer as optimizer
fl_patch.register("megatron.core.optimizer.clip_grads.get_grad_norm_fp32", "fltest_lazy.impls.get_grad_norm_fp32")
import fltest_lazy.impls as impls
(rec,) = [r for r in fl_patch.report() if r.target.endswith("get_grad_norm_fp32")]
print("RESULT" + json.dumps([clip_grads.get_grad_norm_fp32.__code__ is impls.get_grad_norm_fp32.__code__,
    optimizer.get_grad_norm_fp32.__code__ is impls.get_grad_norm_fp32.__code__, rec.status.value, rec.late, rec.detail]))
"""
    env = clean_env(FL_PATCH_PACKS="none")
    assert _result(run_python("-c", code, env=env).stdout) == [True, True, "applied", True, "applied after import"]


LEAF_TARGETS = {
    "megatron.core.optimizer.clip_grads": "count_zeros_fp32",
    "megatron.core.optimizer_param_scheduler": "OptimizerParamScheduler",
    "megatron.core.transformer.utils": "attention_mask_func",
    "megatron.core.tensor_parallel.random": "get_cuda_rng_tracker",
    "megatron.core.fusions.fused_bias_gelu": "bias_gelu",
    "megatron.core.fusions.fused_bias_swiglu": "swiglu",
    "megatron.core.models.common.embeddings.rope_utils": "apply_rotary_pos_emb",
    "megatron.core.jit": "noop_decorator",
}


def test_threads_importing_at_once_patch_each_module_exactly_once(megatron_core, engine) -> None:
    """12 threads import 8 patched modules at once while another thread registers more."""
    import fltest_plugin.impls as impls

    # The replacement for a class must subclass it; for the others any function does.
    for module_name, attr in LEAF_TARGETS.items():
        impl = (
            f"{impls.__name__}.WarmupStableDecayScheduler"
            if attr == "OptimizerParamScheduler"
            else impls.takes_anything
        )
        fl_patch.register(f"{module_name}.{attr}", impl)
    fl_patch.install()
    late_targets = [f"megatron.core.utils.is_te_min_version_{i}" for i in range(20)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(13)

    def importer(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            names = list(LEAF_TARGETS)
            for name in names[index % len(names) :] + names[: index % len(names)]:
                importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def registrar() -> None:
        try:
            barrier.wait(timeout=30)
            for target in late_targets:
                fl_patch.register(target, impls.divide, create=True)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    with fresh_modules(list(LEAF_TARGETS)):
        threads = [threading.Thread(target=importer, args=(i,), daemon=True) for i in range(12)]
        threads.append(threading.Thread(target=registrar, daemon=True))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads), "deadlock: threads still importing after 120 s"
        assert errors == []
        for module_name, attr in LEAF_TARGETS.items():
            target = f"{module_name}.{attr}"
            state = engine.registry.get(target)
            assert state.status is Status.APPLIED, (target, state.detail)
            # install() patched the module objects loaded before (late); the threads' fresh
            # module bodies were each patched exactly once.
            assert [p.holder for p in state.patches].count(sys.modules[module_name]) == 1, target
            assert getattr(sys.modules[module_name], attr) is state.patches[-1].installed
        import megatron.core.utils as mutils

        for target in late_targets:
            (registration,) = engine.registry.registrations(target)
            assert getattr(mutils, target.rsplit(".", 1)[1]) is registration.impl
            assert engine.registry.get(target).status is Status.APPLIED
        fl_patch.uninstall()
    for target in late_targets:
        assert not hasattr(mutils, target.rsplit(".", 1)[1])


def test_del_sys_modules_and_reimport_patches_the_new_module_once(megatron_core, engine) -> None:
    import fltest_plugin.impls as impls

    fl_patch.register("megatron.core.transformer.utils.attention_mask_func", impls.attention_mask_func)
    fl_patch.install()
    with fresh_modules(["megatron.core.transformer.utils"]):
        first = importlib.import_module("megatron.core.transformer.utils")
        del sys.modules["megatron.core.transformer.utils"]
        second = importlib.import_module("megatron.core.transformer.utils")
        assert first is not second
        assert first.attention_mask_func.__code__ is impls.attention_mask_func.__code__
        assert second.attention_mask_func.__code__ is impls.attention_mask_func.__code__
        state = engine.registry.get("megatron.core.transformer.utils.attention_mask_func")
        assert [p.holder for p in state.patches].count(second) == 1
        fl_patch.uninstall()
        assert first.attention_mask_func.__module__ == second.attention_mask_func.__module__ == second.__name__


def test_flagscale_decorators_module_is_served_when_no_real_one_exists(tmp_path, run_python) -> None:
    tree = tmp_path / "tree"
    (tree / "megatron" / "plugin").mkdir(parents=True)
    (tree / "megatron" / "plugin" / "override_registry.py").write_text(
        "from megatron.plugin.decorators import register, overridable\n"
        "register(target='megatron.core.utils.divide', impl='megatron.plugin.utils.divide')\n"
        "register(target='megatron.core.utils.divide', impl='megatron.plugin.utils.divide_musa', vendor='musa')\n"
        "assert overridable(len) is len\n"
    )
    (tree / "megatron" / "plugin" / "utils.py").write_text(
        "def divide(numerator, denominator):\n    return 'default'\n"
        "def divide_musa(numerator, denominator):\n    return 'musa'\n"
    )
    code = (
        "import fl_patch; fl_patch.install()\n"
        "import megatron.core.utils as u\n"
        "print(u.divide(4, 2), 'megatron.plugin.override_registry' in {r.source for r in fl_patch.report()})\n"
    )
    env = clean_env(FL_PATCH_PACKS="cpu")
    env["PYTHONPATH"] = f"{tree}:{env['PYTHONPATH']}"
    out = run_python("-c", code, env=env).stdout.strip().splitlines()[-1]
    assert out == "default True"
    env["MG_FL_PREFER"] = "musa"
    assert run_python("-c", code, env=env).stdout.strip().splitlines()[-1].startswith("musa ")
    # A tree that is only the current directory is not a source: nothing the user named.
    env = clean_env(FL_PATCH_PACKS="cpu")
    assert run_python("-c", code, env=env, cwd=tree).stdout.strip().splitlines()[-1] == "2 False"


def test_an_impl_module_that_imports_another_targets_module_serves_both(engine) -> None:
    """Loading impls (for pkg.first.f) imports pkg.second while impls is half-executed."""
    for name in [n for n in sys.modules if n.startswith("fltest_pending")]:
        del sys.modules[name]
    fl_patch.register("fltest_pending.pkg.first.f", "fltest_pending.impls.f")
    fl_patch.register("fltest_pending.pkg.second.C", "fltest_pending.impls.C2")
    fl_patch.install()
    import fltest_pending.pkg.first as first
    import fltest_pending.pkg.second as second
    from fltest_pending import impls

    assert first.f() == "patched"
    # The name keeps the upstream class, which builds the impl (core/classes.py).
    assert second.C is impls._UpstreamC and type(second.C()) is impls.C2
    assert {r.target: r.status for r in fl_patch.report()} == {
        "fltest_pending.pkg.first.f": Status.APPLIED,
        "fltest_pending.pkg.second.C": Status.APPLIED,
    }
