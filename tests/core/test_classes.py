"""Class targets (fl_patch.core.classes) on megatron's own idioms, in a real training run (issue 43).

The registry (tests/support/plugins/fltest_idioms) replaces the base of every megatron module
(``MegatronModule``, ``GraphableMegatronModule``: a later ``class TransformerLayer(GraphableMegatronModule,
BaseTransformerLayer)`` mixes it with ``ABCMeta``), a class whose upstream ``__init__`` calls
``super(ColumnParallelLinear, self)``, a base class whose subclass (``MoELayer``) was defined before
the patch, and an autograd Function that megatron binds as ``bias_gelu_impl = GeLUFunction.apply``
at import. Each impl is written as a vendor writes it (a subclass calling ``super()``).

A factory class (megatron's ``WrappedTorchNorm``, whose ``__new__`` returns a torch norm) is replaced by
an impl overriding ``__new__``: building the name runs the impl's ``__new__`` (in process, fast).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fl_patch
from fl_patch import Status
from fl_patch.core import classes

from ..conftest import clean_env

PROBE = Path(__file__).resolve().parents[1] / "support" / "plugins" / "fltest_idioms" / "probe.py"

NORM = "megatron.core.transformer.torch_norm.WrappedTorchNorm"


def _probe(run_python, tmp_path: Path, **env: str) -> dict[str, object]:
    proc = run_python("-m", "fl_patch", str(PROBE), str(tmp_path / "log.jsonl"), env=clean_env(**env), timeout=600)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_megatron_idioms_keep_working_with_class_impls(run_python, tmp_path: Path) -> None:
    plain = _probe(run_python, tmp_path)
    patched = _probe(run_python, tmp_path, FL_PATCH_REGISTRY="fltest_idioms.registry")
    # Every class applied: megatron imported with its module base replaced (no metaclass conflict).
    assert patched["applied"] == [
        "BaseMoELayer", "ColumnParallelLinear", "GeLUFunction", "GraphableMegatronModule", "MegatronModule",
    ]  # fmt: skip
    # Impls that add nothing change nothing: the same losses, bit for bit (MoE built through MoELayer,
    # a subclass of the replaced BaseMoELayer defined before the patch).
    assert patched["losses"] == plain["losses"]
    # ColumnParallelLinear(...) builds the impl, whose super().__init__ runs upstream's, which calls
    # super(ColumnParallelLinear, self): no recursion, the impl's __init__ ran once per layer.
    assert patched["built"] == ["CountingColumnParallelLinear"] and patched["name_builds_impl"] is True
    # bias_gelu_impl = GeLUFunction.apply (bound at megatron's import) and the name reach the impl's forward.
    assert patched["gelu_calls"] == 1 and patched["gelu_doubled"] is True and patched["gelu_through_name"] is True
    # The name stays the upstream class: isinstance/issubclass, pickling by name, fl_patch.original.
    assert patched["isinstance"] is True and patched["pickled"] is True and patched["name_is_upstream"] is True


@pytest.mark.parametrize("impl", ["WrappedTorchNorm", "SuperWrappedTorchNorm"])
def test_a_factory_class_impl_runs_its_own_new_and_upstreams_stays_reachable(megatron_core, engine, impl) -> None:
    import torch
    from fltest_idioms.factory import VendorRMSNorm
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    def config(normalization: str) -> TransformerConfig:
        return TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1, normalization=normalization)

    rms, layer = config("RMSNorm"), config("LayerNorm")
    fl_patch.register(NORM, f"fltest_idioms.factory.{impl}")
    fl_patch.install()
    (record,) = [r for r in fl_patch.report() if r.target == NORM]
    assert record.status is Status.APPLIED, record.detail
    assert type(WrappedTorchNorm(rms, 8)) is VendorRMSNorm  # the impl's __new__ ran
    # Its call of upstream's __new__ (by name, or super()) runs upstream's, not the redirect again.
    assert type(WrappedTorchNorm(layer, 8)) is torch.nn.LayerNorm
    # Upstream's own construction stays reachable while the patch is in place (compare mode builds it).
    assert type(classes.upstream_new(WrappedTorchNorm)(WrappedTorchNorm, rms, 8)) is torch.nn.RMSNorm
    fl_patch.uninstall()
    assert type(WrappedTorchNorm(rms, 8)) is torch.nn.RMSNorm


PROTOCOL = "megatron.core.transformer.mlp.LinearFc1Builder"  # class LinearFc1Builder(Protocol), not runtime_checkable


def test_a_subclass_of_a_protocol_that_is_not_runtime_checkable_is_applied(megatron_core, engine) -> None:
    from megatron.core.transformer import mlp

    upstream = mlp.LinearFc1Builder
    fl_patch.register(PROTOCOL, "fltest_idioms.typing_classes.LinearFc1Builder")
    fl_patch.install()
    (record,) = [r for r in fl_patch.report() if r.target == PROTOCOL]
    # issubclass(impl, Protocol) raises TypeError: the engine reads the MRO instead of refusing the impl.
    assert record.status is Status.APPLIED, record.detail
    assert mlp.LinearFc1Builder is upstream and fl_patch.original(PROTOCOL) is upstream


TYPEDDICT = "megatron.core.optimizer_param_scheduler.ParamGroupOverride"  # class ParamGroupOverride(TypedDict)


def test_a_typeddict_target_is_refused_naming_the_cause(megatron_core, engine) -> None:
    from megatron.core import optimizer_param_scheduler

    upstream = optimizer_param_scheduler.ParamGroupOverride
    fl_patch.register(TYPEDDICT, "fltest_idioms.typing_classes.ParamGroupOverride")
    with pytest.warns(UserWarning, match="TypedDict"):
        fl_patch.install()
    (record,) = [r for r in fl_patch.report() if r.target == TYPEDDICT]
    # Not "does not subclass": the impl does, as far as a TypedDict can; the cause is what a TypedDict is.
    assert record.status is Status.IMPL_FAILED
    assert "is a TypedDict: its instances are plain dicts" in record.detail
    assert optimizer_param_scheduler.ParamGroupOverride is upstream


BUILDER = "megatron.core.datasets.blended_megatron_dataset_builder.BlendedMegatronDatasetBuilder"


def test_a_class_whose_init_has_a_parameter_named_cls_is_redirected(megatron_core, engine) -> None:
    import inspect

    from megatron.core.datasets import blended_megatron_dataset_builder as module

    assert "cls" in inspect.signature(module.BlendedMegatronDatasetBuilder).parameters
    fl_patch.register(BUILDER, "fltest_idioms.builders.BlendedMegatronDatasetBuilder")
    fl_patch.install()
    (record,) = [r for r in fl_patch.report() if r.target == BUILDER]
    # fl_patch's __new__ shows what Name(...) takes, behind its own receiver: that receiver's name must not
    # collide with upstream's parameter cls (ValueError "duplicate parameter name", the class left unpatched).
    assert record.status is Status.APPLIED, record.detail
    assert module.BlendedMegatronDatasetBuilder is fl_patch.original(BUILDER)


SCALER = "megatron.core.optimizer.grad_scaler.DynamicGradScaler"


def test_an_impl_that_defines_no_init_shows_upstreams_signature_at_the_name(megatron_core, engine) -> None:
    import inspect

    from megatron.core.optimizer import grad_scaler

    before = inspect.signature(grad_scaler.DynamicGradScaler)
    fl_patch.register(SCALER, "fltest_idioms.builders.DynamicGradScaler")
    fl_patch.install()
    (record,) = [r for r in fl_patch.report() if r.target == SCALER]
    assert record.status is Status.APPLIED, record.detail
    # inspect.signature(Name) reads fl_patch's __new__: it must show what Name(...) takes (upstream's __init__,
    # inherited by the impl), not the redirect's own (*args, **kwargs).
    assert inspect.signature(grad_scaler.DynamicGradScaler) == before
    assert "initial_scale" in before.parameters
    fl_patch.uninstall()
    assert inspect.signature(grad_scaler.DynamicGradScaler) == before


SHARDS = "megatron.core.dist_checkpointing.strategies.checkpointable.LocalShardsContainer"


@pytest.mark.parametrize("class_first", [True, False], ids=["class-then-new", "new-then-class"])
def test_a_new_patch_beside_its_class_patch_composes_in_either_order(megatron_core, engine, class_first) -> None:
    """``Name`` and ``Name.__new__`` both patched (ORACLE_FINDINGS.md, finding 9): the ``__new__`` patch goes inside
    the class patch's redirect, so ``Name(...)`` builds the class's impl through the ``__new__`` impl, whichever
    is registered first; undone, upstream's class is built again and the ``__new__`` impl is no longer called."""
    import torch
    from fltest_idioms import builders
    from megatron.core.dist_checkpointing.strategies import checkpointable

    upstream = checkpointable.LocalShardsContainer
    registrations = [
        (SHARDS, "fltest_idioms.builders.LocalShardsContainer"),
        (f"{SHARDS}.__new__", "fltest_idioms.builders.local_shards_new"),
    ]
    for target, impl in registrations if class_first else list(reversed(registrations)):
        fl_patch.register(target, impl)
    builders.NEW_CALLS.clear()
    fl_patch.install()
    records = {r.target: r for r in fl_patch.report() if r.target.startswith(SHARDS)}
    assert records[SHARDS].status is Status.APPLIED, records[SHARDS]
    assert records[f"{SHARDS}.__new__"].status is Status.APPLIED, records[f"{SHARDS}.__new__"]
    # (its __init__ wants sharded tensors: __new__ is what both patches change, called as Name(...) calls it)
    built = checkpointable.LocalShardsContainer.__new__(checkpointable.LocalShardsContainer, [torch.ones(2)])
    assert type(built) is builders.LocalShardsContainer and builders.NEW_CALLS == [builders.LocalShardsContainer]
    fl_patch.uninstall()
    builders.NEW_CALLS.clear()
    assert type(upstream.__new__(upstream, [torch.ones(2)])) is upstream and builders.NEW_CALLS == []


def test_a_new_patch_applied_before_its_class_patch_is_replaced_and_undone_in_full(megatron_core, engine) -> None:
    """``Name.__new__`` patched first, ``Name`` later (a late registration): the ``__new__`` impl sits beneath the
    redirect, where upstream's ``__new__`` was. Registered again, the old one is taken out from there (not left
    running beneath the new one); uninstalled, upstream's class is built by upstream's ``__new__`` again, with no
    copy of the impl left behind the pass-through that the class's undo leaves."""
    import torch
    from fltest_idioms import builders
    from megatron.core.dist_checkpointing.strategies import checkpointable

    from fl_patch.core import classes

    upstream = checkpointable.LocalShardsContainer
    left = classes.redirect_state_at(upstream)
    if left is not None:  # the pass-through an earlier test's undo leaves (classes.undo): upstream's own __new__ back,
        upstream.__new__ = left.beneath  # so that the __new__ patch below is set at the name, not put inside
    assert classes.redirect_state_at(upstream) is None
    fl_patch.register(f"{SHARDS}.__new__", "fltest_idioms.builders.local_shards_new")
    fl_patch.install()
    fl_patch.register(SHARDS, "fltest_idioms.builders.LocalShardsContainer")  # applied late, over the __new__ patch
    records = {r.target: r for r in fl_patch.report() if r.target.startswith(SHARDS)}
    assert records[SHARDS].status is Status.APPLIED and records[f"{SHARDS}.__new__"].status is Status.APPLIED, records
    builders.NEW_CALLS.clear()
    built = upstream.__new__(upstream, [torch.ones(2)])
    assert type(built) is builders.LocalShardsContainer and builders.NEW_CALLS == [builders.LocalShardsContainer]
    fl_patch.register(f"{SHARDS}.__new__", "fltest_idioms.builders.local_shards_new")  # a new registration
    builders.NEW_CALLS.clear()
    built = upstream.__new__(upstream, [torch.ones(2)])
    assert type(built) is builders.LocalShardsContainer and builders.NEW_CALLS == [builders.LocalShardsContainer]
    fl_patch.uninstall()
    builders.NEW_CALLS.clear()
    assert type(upstream.__new__(upstream, [torch.ones(2)])) is upstream and builders.NEW_CALLS == []
