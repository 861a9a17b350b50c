"""Every kind of target, patched on the real megatron-core 0.19.2 (fl_patch.core.apply)."""

from __future__ import annotations

import copy
import importlib
import inspect
import pickle
import sys

import pytest
import torch

import fl_patch
from fl_patch import Status
from fl_patch.runtime import RUNTIME

from ..conftest import fresh_modules, runs

PLUGIN = "fltest_plugin.impls"
GRAD_NORM = "megatron.core.optimizer.clip_grads.get_grad_norm_fp32"
UNSCALE = "megatron.core.optimizer.optimizer.MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan"
SCHEDULER = "megatron.core.optimizer_param_scheduler.OptimizerParamScheduler"


def status_of(target: str) -> fl_patch.PatchRecord:
    (record,) = [r for r in fl_patch.report() if r.target == target and r.chosen_vendor == r.vendor]
    return record


@pytest.fixture
def plugin(megatron_core, engine):
    impls = importlib.import_module(PLUGIN)
    impls.CALLS.clear()
    return impls


def test_module_function_and_every_name_bound_to_it(plugin):
    from megatron.core.optimizer import clip_grads, layer_wise_optimizer
    from megatron.core.optimizer import optimizer as optimizer_module

    upstream = clip_grads.get_grad_norm_fp32
    # optimizer.optimizer and layer_wise_optimizer did `from .clip_grads import get_grad_norm_fp32`
    assert optimizer_module.get_grad_norm_fp32 is upstream
    fl_patch.register(GRAD_NORM, f"{PLUGIN}.get_grad_norm_fp32")
    fl_patch.install()

    for module in (clip_grads, optimizer_module, layer_wise_optimizer):
        assert runs(module.get_grad_norm_fp32, plugin.get_grad_norm_fp32), module.__name__
    assert fl_patch.original(GRAD_NORM) is upstream
    record = status_of(GRAD_NORM)
    assert record.status is Status.APPLIED and record.late and record.kind == "function"

    # The impl runs, wherever it is called from.
    grads = [torch.tensor([3.0, 4.0])]
    assert optimizer_module.get_grad_norm_fp32(grads) == pytest.approx(5.0)
    assert plugin.CALLS == ["get_grad_norm_fp32"]

    fl_patch.uninstall()
    for module in (clip_grads, optimizer_module, layer_wise_optimizer):
        assert module.get_grad_norm_fp32 is upstream, module.__name__


def test_impl_calls_through_to_the_original(plugin):
    from megatron.core import utils

    fl_patch.register("megatron.core.utils.divide", f"{PLUGIN}.divide")
    fl_patch.install()
    assert utils.divide(6, 3) == ("patched", 2)
    with pytest.raises(AssertionError):  # upstream's own check still runs
        utils.divide(7, 3)
    assert plugin.CALLS == ["divide", "divide"]


def test_patch_at_import_time_is_not_late_and_reaches_later_importers(plugin):
    fl_patch.register(GRAD_NORM, f"{PLUGIN}.get_grad_norm_fp32")
    fl_patch.install()
    saved = sys.modules["megatron.core.optimizer.clip_grads"]
    with fresh_modules(["megatron.core.optimizer.clip_grads"]):
        fresh = importlib.import_module("megatron.core.optimizer.clip_grads")
        assert fresh is not saved
        assert runs(fresh.get_grad_norm_fp32, plugin.get_grad_norm_fp32)
        # upstream's function of the fresh module body is the original now
        assert fl_patch.original(GRAD_NORM).__module__ == "megatron.core.optimizer.clip_grads"
        assert fl_patch.original(GRAD_NORM) is not saved.get_grad_norm_fp32
        record = status_of(GRAD_NORM)
        assert record.status is Status.APPLIED and not record.late
        # The loader was handed back: inspect.getsource works on the patched module.
        assert "def clip_grad_by_total_norm_fp32" in inspect.getsource(fresh)
        assert type(fresh.__loader__).__name__ == "SourceFileLoader"
        assert type(fresh.__spec__.loader).__name__ == "SourceFileLoader"


def test_inherited_method_patched_on_its_owner(plugin):
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    from megatron.core.optimizer.optimizer import Float16OptimizerWithFloat16Params, MixedPrecisionOptimizer

    upstream = vars(MixedPrecisionOptimizer)["_unscale_main_grads_and_check_for_nan"]
    fl_patch.register(UNSCALE, f"{PLUGIN}.unscale_main_grads_and_check_for_nan")
    fl_patch.install()
    impl = plugin.unscale_main_grads_and_check_for_nan
    assert runs(MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan, impl)
    # Subclasses inherit it: nothing was set on them.
    assert "_unscale_main_grads_and_check_for_nan" not in vars(Float16OptimizerWithFloat16Params)
    installed = MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan
    assert Float16OptimizerWithFloat16Params._unscale_main_grads_and_check_for_nan is installed
    assert DistributedOptimizer._unscale_main_grads_and_check_for_nan is installed
    assert fl_patch.original(UNSCALE) is upstream
    assert status_of(UNSCALE).kind == "method"
    fl_patch.uninstall()
    assert vars(MixedPrecisionOptimizer)["_unscale_main_grads_and_check_for_nan"] is upstream


def test_inherited_method_patched_on_a_subclass_only(plugin):
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    from megatron.core.optimizer.optimizer import Float16OptimizerWithFloat16Params, MixedPrecisionOptimizer

    upstream = vars(MixedPrecisionOptimizer)["_unscale_main_grads_and_check_for_nan"]
    target = "megatron.core.optimizer.optimizer.Float16OptimizerWithFloat16Params._unscale_main_grads_and_check_for_nan"
    fl_patch.register(target, f"{PLUGIN}.unscale_main_grads_and_check_for_nan")
    fl_patch.install()
    assert runs(
        Float16OptimizerWithFloat16Params._unscale_main_grads_and_check_for_nan,
        plugin.unscale_main_grads_and_check_for_nan,
    )
    assert MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan is upstream
    assert DistributedOptimizer._unscale_main_grads_and_check_for_nan is upstream
    assert fl_patch.original(target) is upstream
    fl_patch.uninstall()
    assert "_unscale_main_grads_and_check_for_nan" not in vars(Float16OptimizerWithFloat16Params)


def test_staticmethod_stays_static(plugin):
    from megatron.core.optimizer.optimizer import Float16OptimizerWithFloat16Params, MegatronOptimizer

    target = "megatron.core.optimizer.optimizer.MegatronOptimizer._extract_common_per_param_step"
    raw = vars(MegatronOptimizer)["_extract_common_per_param_step"]
    fl_patch.register(target, f"{PLUGIN}.extract_common_per_param_step")
    fl_patch.install()
    assert isinstance(vars(MegatronOptimizer)["_extract_common_per_param_step"], staticmethod)
    # Called on the class, and through an instance of a subclass (no self injected).
    assert MegatronOptimizer._extract_common_per_param_step({"state": {}}) == "patched-step"
    instance = object.__new__(Float16OptimizerWithFloat16Params)
    assert instance._extract_common_per_param_step({"state": {}}) == "patched-step"
    assert fl_patch.original(target) is raw.__func__
    assert status_of(target).kind == "staticmethod"
    fl_patch.uninstall()
    assert vars(MegatronOptimizer)["_extract_common_per_param_step"] is raw


def test_classmethod_binds_each_subclass_to_its_own_cls(plugin):
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    class VendorOptimizer(DistributedOptimizer):
        pass

    target = "megatron.core.optimizer.distrib_optimizer.DistributedOptimizer._is_distopt_quantized_param"
    raw = vars(DistributedOptimizer)["_is_distopt_quantized_param"]
    fl_patch.register(target, f"{PLUGIN}.is_distopt_quantized_param")
    fl_patch.install()
    assert isinstance(vars(DistributedOptimizer)["_is_distopt_quantized_param"], classmethod)
    assert DistributedOptimizer._is_distopt_quantized_param(torch.zeros(1)) is DistributedOptimizer
    assert VendorOptimizer._is_distopt_quantized_param(torch.zeros(1)) is VendorOptimizer
    assert fl_patch.original(target) is raw.__func__
    assert status_of(target).kind == "classmethod"
    fl_patch.uninstall()
    assert vars(DistributedOptimizer)["_is_distopt_quantized_param"] is raw


def _sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)


def _scheduler_args() -> dict[str, object]:
    return dict(
        init_lr=0.0,
        max_lr=1.0,
        min_lr=0.1,
        lr_warmup_steps=2,
        lr_decay_steps=10,
        lr_decay_style="linear",
        start_wd=0.0,
        end_wd=0.0,
        wd_incr_steps=10,
        wd_incr_style="constant",
    )


def test_whole_class_seed_pattern_isinstance_pickle_deepcopy(plugin):
    from megatron.core import optimizer_param_scheduler

    upstream = optimizer_param_scheduler.OptimizerParamScheduler
    fl_patch.register(SCHEDULER, f"{PLUGIN}.WarmupStableDecayScheduler")
    fl_patch.install()
    # The impl subclassed the original it imported by its public name: no recursion.
    assert plugin.WarmupStableDecayScheduler.__mro__[1] is upstream
    # The name keeps the upstream class (docs/reliability.md, "Identity and kinds of targets");
    # what it builds is the impl.
    assert optimizer_param_scheduler.OptimizerParamScheduler is upstream
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    scheduler = OptimizerParamScheduler(_sgd(), **_scheduler_args())
    assert type(scheduler) is plugin.WarmupStableDecayScheduler and isinstance(scheduler, upstream)
    assert plugin.CALLS == ["WarmupStableDecayScheduler.__init__"]
    assert type(pickle.loads(pickle.dumps(scheduler))) is plugin.WarmupStableDecayScheduler
    assert type(copy.deepcopy(scheduler)) is plugin.WarmupStableDecayScheduler
    assert pickle.loads(pickle.dumps(upstream)) is upstream
    assert fl_patch.original(SCHEDULER) is upstream and status_of(SCHEDULER).kind == "class"
    fl_patch.uninstall()
    assert optimizer_param_scheduler.OptimizerParamScheduler is upstream
    assert type(OptimizerParamScheduler(_sgd(), **_scheduler_args())) is upstream
    # (fl_patch's __new__ stays as a pass-through: CPython cannot give a class back its inherited __new__;
    # core/classes.py, undo) The upstream class builds itself and shows its own signature again.
    assert inspect.signature(upstream) == inspect.signature(upstream.__init__).replace(
        parameters=list(inspect.signature(upstream.__init__).parameters.values())[1:]
    )


def test_a_factory_class_impl_decides_what_is_built_with_its_own_new(plugin):
    """WrappedTorchNorm's __new__ returns a torch norm, not an instance: an impl's own __new__ decides what
    ``WrappedTorchNorm(...)`` builds, and reaches upstream's for the rest (examples/my_plugin/my_plugin/norm.py)."""
    from megatron.core.transformer import TransformerConfig, torch_norm

    upstream = torch_norm.WrappedTorchNorm

    class MyRMSNorm(torch.nn.RMSNorm):
        pass

    class Factory(upstream):  # type: ignore[misc,valid-type]
        def __new__(cls, config, hidden_size, eps=1e-5, persist_layer_norm=False, zero_centered_gamma=False,
                    normalization="LayerNorm"):  # fmt: skip
            if config.normalization == "RMSNorm":
                return MyRMSNorm(hidden_size, eps=eps)
            return upstream.__new__(
                cls, config, hidden_size, eps, persist_layer_norm, zero_centered_gamma, normalization
            )

    rms = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1, normalization="RMSNorm")
    layer = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1, normalization="LayerNorm")
    fl_patch.register("megatron.core.transformer.torch_norm.WrappedTorchNorm", Factory)
    fl_patch.install()
    assert torch_norm.WrappedTorchNorm is upstream
    assert type(torch_norm.WrappedTorchNorm(rms, 8)) is MyRMSNorm
    assert type(torch_norm.WrappedTorchNorm(layer, 8)) is torch.nn.LayerNorm  # upstream's __new__, through the impl's
    fl_patch.uninstall()
    assert type(torch_norm.WrappedTorchNorm(rms, 8)) is torch.nn.RMSNorm


def test_class_replacement_that_does_not_subclass_is_refused(plugin):
    from megatron.core import optimizer_param_scheduler

    upstream = optimizer_param_scheduler.OptimizerParamScheduler
    fl_patch.register(SCHEDULER, f"{PLUGIN}.NotASubclass")
    with pytest.warns(fl_patch.FlPatchWarning, match="does not subclass") as caught:
        fl_patch.install()
    assert len([w for w in caught if issubclass(w.category, fl_patch.FlPatchWarning)]) == 1
    assert optimizer_param_scheduler.OptimizerParamScheduler is upstream
    assert status_of(SCHEDULER).status is Status.IMPL_FAILED


def test_module_attribute_and_constant(plugin):
    from megatron.core.tensor_parallel import random as tp_random
    from megatron.core.transformer import transformer_config

    fake_torch = object()
    fl_patch.register("megatron.core.tensor_parallel.random.torch", fake_torch)
    target_const = "megatron.core.tensor_parallel.random._MODEL_PARALLEL_RNG_TRACKER_NAME"
    fl_patch.register(target_const, f"{PLUGIN}.RNG_TRACKER_NAME")  # a string impl is always a path
    fl_patch.install()
    assert tp_random.torch is fake_torch
    assert tp_random._MODEL_PARALLEL_RNG_TRACKER_NAME == "cpu-rng"
    # The torch module is shared by everyone: nothing else was rebound.
    assert transformer_config.torch is torch
    assert status_of("megatron.core.tensor_parallel.random.torch").kind == "module"
    fl_patch.uninstall()
    assert tp_random.torch is torch
    assert tp_random._MODEL_PARALLEL_RNG_TRACKER_NAME == "model-parallel-rng"


def test_patched_function_runs_inside_torch_compile_fullgraph(plugin):
    from megatron.core.transformer import utils as transformer_utils

    fl_patch.register("megatron.core.transformer.utils.attention_mask_func", f"{PLUGIN}.attention_mask_func")
    fl_patch.install()

    def region(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return transformer_utils.attention_mask_func(scores, mask) + 0.0

    torch._dynamo.reset()
    compiled = torch.compile(region, fullgraph=True, backend="eager")
    scores = torch.arange(4.0).reshape(2, 2)
    mask = torch.tensor([[True, False], [False, True]])
    expected = scores * 2.0 + 1.0
    assert torch.equal(region(scores, mask), expected)
    assert torch.equal(compiled(scores, mask), expected)


def test_signature_and_pickle_of_patched_function(plugin):
    from megatron.core.optimizer import clip_grads

    upstream = clip_grads.get_grad_norm_fp32
    fl_patch.register(GRAD_NORM, f"{PLUGIN}.get_grad_norm_fp32")
    fl_patch.install()
    patched = clip_grads.get_grad_norm_fp32
    # The patched name shows upstream's signature (its __wrapped__), as any functools.wraps wrapper does.
    assert inspect.signature(patched) == inspect.signature(upstream)
    assert (
        str(inspect.signature(plugin.get_grad_norm_fp32))
        == "(grads_for_norm, norm_type=2, grad_stats_parallel_group=None)"
    )
    assert pickle.loads(pickle.dumps(patched)) is patched  # found by name where it is installed
    assert copy.deepcopy(patched) is patched
    assert pickle.loads(pickle.dumps(plugin.get_grad_norm_fp32)) is plugin.get_grad_norm_fp32
    fl_patch.uninstall()
    assert pickle.loads(pickle.dumps(clip_grads.get_grad_norm_fp32)) is upstream


def test_reload_reapplies_once(plugin):
    from megatron.core.optimizer import clip_grads

    fl_patch.register(GRAD_NORM, f"{PLUGIN}.get_grad_norm_fp32")
    fl_patch.install()
    state = RUNTIME.registry.get(GRAD_NORM)
    before = fl_patch.original(GRAD_NORM)
    reloaded = importlib.reload(clip_grads)
    assert runs(reloaded.get_grad_norm_fp32, plugin.get_grad_norm_fp32)
    assert len(state.patches) == 1
    fresh_original = fl_patch.original(GRAD_NORM)
    assert fresh_original is not before and fresh_original.__module__ == clip_grads.__name__
    importlib.reload(clip_grads)
    assert len(state.patches) == 1
    fl_patch.uninstall()
    assert clip_grads.get_grad_norm_fp32.__module__ == "megatron.core.optimizer.clip_grads"


def test_reload_of_replaced_class_rebuilds_the_subclass(plugin):
    from megatron.core import optimizer_param_scheduler

    fl_patch.register(SCHEDULER, f"{PLUGIN}.WarmupStableDecayScheduler")
    fl_patch.install()
    try:
        importlib.reload(optimizer_param_scheduler)
        fresh_upstream = fl_patch.original(SCHEDULER)
        assert optimizer_param_scheduler.OptimizerParamScheduler is fresh_upstream
        # The impl module was imported again: its class subclasses the fresh upstream class, which builds it.
        impl = sys.modules[PLUGIN].WarmupStableDecayScheduler
        assert issubclass(impl, fresh_upstream) and runs(fresh_upstream, impl)
        assert status_of(SCHEDULER).status is Status.APPLIED
    finally:
        fl_patch.uninstall()
        importlib.reload(optimizer_param_scheduler)
        importlib.reload(sys.modules[PLUGIN])


def test_double_install_and_reinstall(plugin):
    from megatron.core.optimizer import clip_grads

    upstream = clip_grads.get_grad_norm_fp32
    fl_patch.register(GRAD_NORM, f"{PLUGIN}.get_grad_norm_fp32")
    assert fl_patch.install() and fl_patch.install()
    assert sum(isinstance(f, fl_patch.hooks.PatchingFinder) for f in sys.meta_path) == 1
    assert fl_patch.uninstall() and not fl_patch.uninstall()
    assert clip_grads.get_grad_norm_fp32 is upstream
    assert not any(isinstance(f, fl_patch.hooks.PatchingFinder) for f in sys.meta_path)
    fl_patch.install()
    assert runs(clip_grads.get_grad_norm_fp32, plugin.get_grad_norm_fp32)


def test_a_wrapt_proxy_would_be_skipped_by_torch_compile(megatron_core):
    """Why fl_patch installs real functions: the pitfall this engine avoids, reproduced."""
    import wrapt
    from megatron.core.transformer import utils as transformer_utils

    upstream = transformer_utils.attention_mask_func
    proxy = wrapt.FunctionWrapper(upstream, lambda wrapped, instance, args, kwargs: args[0] * 2.0 + 1.0)
    transformer_utils.attention_mask_func = proxy
    try:

        def region(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return transformer_utils.attention_mask_func(scores, mask) + 0.0

        torch._dynamo.reset()
        scores = torch.arange(4.0).reshape(2, 2)
        mask = torch.tensor([[True, False], [False, True]])
        # (upstream masks in place: every call gets its own copy of the scores)
        eager = region(scores.clone(), mask)
        compiled = torch.compile(region, fullgraph=True, backend="eager")(scores.clone(), mask)
        assert torch.equal(eager, scores * 2.0 + 1.0)
        assert not torch.equal(compiled, eager)  # Dynamo inlined upstream's __code__
        assert torch.equal(compiled, upstream(scores.clone(), mask))
    finally:
        transformer_utils.attention_mask_func = upstream


def test_a_name_rebound_within_the_same_module_is_patched_too(plugin):
    """finalize_model_grads keeps an old name: ``_allreduce_layernorm_grads = _allreduce_non_tensor...``."""
    # (the package attribute ``distributed.finalize_model_grads`` is the function of that name)
    fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")
    upstream = fmg._allreduce_non_tensor_model_parallel_grads
    assert fmg._allreduce_layernorm_grads is upstream
    fl_patch.register(
        "megatron.core.distributed.finalize_model_grads._allreduce_non_tensor_model_parallel_grads",
        plugin.takes_anything,
    )
    fl_patch.install()
    assert runs(fmg._allreduce_non_tensor_model_parallel_grads, plugin.takes_anything)
    assert fmg._allreduce_layernorm_grads is fmg._allreduce_non_tensor_model_parallel_grads
    fl_patch.uninstall()
    assert fmg._allreduce_non_tensor_model_parallel_grads is upstream
    assert fmg._allreduce_layernorm_grads is upstream


def test_a_submodule_shadowed_by_a_same_named_function_still_owns_its_targets(plugin):
    """megatron.core.inference.moe does ``from .vllm_fused_moe import vllm_fused_moe``."""
    import megatron.core.inference.moe as moe_package

    vllm_module = sys.modules["megatron.core.inference.moe.vllm_fused_moe"]
    assert not isinstance(moe_package.vllm_fused_moe, type(sys))  # the package attribute is the function
    upstream = vllm_module._ceil_div
    target = "megatron.core.inference.moe.vllm_fused_moe._ceil_div"
    fl_patch.register(target, plugin.takes_anything)
    fl_patch.install()
    assert runs(vllm_module._ceil_div, plugin.takes_anything)
    assert status_of(target).module == "megatron.core.inference.moe.vllm_fused_moe"
    fl_patch.uninstall()
    assert vllm_module._ceil_div is upstream


def test_names_bound_during_a_circular_import_are_rebound(engine):
    for name in ("fltest_circular.a", "fltest_circular.b"):
        sys.modules.pop(name, None)
    fl_patch.register("fltest_circular.a.f", "fltest_circular.impl.f")
    fl_patch.install()
    from fltest_circular import a, b

    assert a.f() == "patched"
    assert b.f() == "patched" and a.CALLS_F_THROUGH_B() == "patched"  # b bound f before a finished
    (patch,) = engine.registry.get("fltest_circular.a.f").patches
    assert [(m().__name__, n) for m, n, _ in patch.aliases] == [("fltest_circular.b", "f")]
    fl_patch.uninstall()
    assert a.f() == b.f() == "upstream"
