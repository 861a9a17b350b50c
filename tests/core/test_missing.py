"""Issue 30: a name upstream sets to None for want of an optional dependency is what a vendor fills in.

Real megatron-core 0.19.2 without DeepEP: ``fused_a2a.fused_dispatch``/``fused_combine``/
``set_deepep_num_sms`` are ``None`` and ``HAVE_DEEP_EP`` is False. A vendor's registrations
for them are installed (the record says once "upstream had None here"), ``--check`` calls them
ok with that note, and megatron's DeepEP dispatch manager runs on them, in this process.
"""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch

import fl_patch
from fl_patch import Status
from fl_patch.diagnostics import check as check_module

from ..conftest import fresh_modules

A2A = "megatron.core.transformer.moe.fused_a2a"
DISPATCHER = "megatron.core.transformer.moe.token_dispatcher"
NAMES = ("fused_dispatch", "fused_combine", "set_deepep_num_sms", "HAVE_DEEP_EP")


def test_vendor_fills_upstream_none_and_megatron_calls_it(megatron_core, engine, monkeypatch) -> None:
    import fltest_plugin.deepep as deepep
    from megatron.core.transformer.transformer_config import TransformerConfig

    deepep.CALLS.clear()
    for name in NAMES:
        fl_patch.register(f"{A2A}.{name}", f"fltest_plugin.deepep.{name}", vendor="kunlunxin")
    monkeypatch.setenv("MG_FL_PREFER", "kunlunxin")
    with fresh_modules([A2A, DISPATCHER]):
        fl_patch.install()
        dispatcher = importlib.import_module(DISPATCHER)  # imports fused_a2a: patched as it loads
        a2a = importlib.import_module(A2A)
        records = {r.target.rpartition(".")[2]: r for r in fl_patch.report()}
        for name in NAMES[:3]:
            assert records[name].status is Status.APPLIED, records[name].detail
            assert "upstream had None here" in records[name].detail and "HAVE_DEEP_EP" in records[name].detail
            assert getattr(dispatcher, name) is getattr(deepep, name)  # token_dispatcher's own names
        assert records["HAVE_DEEP_EP"].status is Status.APPLIED and a2a.HAVE_DEEP_EP is True
        assert "upstream had None" not in records["HAVE_DEEP_EP"].detail  # (it was False, not None)

        config = TransformerConfig(
            num_layers=1, hidden_size=8, num_attention_heads=2, num_moe_experts=4, moe_router_topk=2
        )
        manager = dispatcher._DeepepManager(
            group=None, num_local_experts=4, router_topk=2, num_experts=4, config=config
        )  # upstream raises "DeepEP is not installed" when fused_dispatch is None
        probs = torch.softmax(torch.randn(6, 4), dim=-1)
        routing = torch.zeros(6, 4, dtype=torch.bool).scatter_(1, torch.topk(probs, 2).indices, True)
        manager.setup_metadata(routing, probs)
        hidden = torch.randn(6, 8)
        dispatched = manager.dispatch(hidden)
        assert int(manager.get_number_of_tokens_per_expert().sum()) == 12
        assert torch.equal(manager.combine(dispatched), hidden)
        assert deepep.CALLS == ["set_deepep_num_sms(20)", "fused_dispatch", "fused_combine"]
        fl_patch.uninstall()
        assert a2a.fused_dispatch is None and a2a.HAVE_DEEP_EP is False


def _check_restores_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """check() sets FL_PATCH_STRICT=0 in this process's environment (and drops FL_PATCH): set through monkeypatch
    first, so that it is undone after the test. Left set, a later test in this worker sees FL_PATCH_STRICT=0 as
    this process's setting (tests/host/test_children.py compares a child's environment with it)."""
    monkeypatch.setenv("FL_PATCH_STRICT", "0")  # what check() sets, before it does
    monkeypatch.delenv("FL_PATCH", raising=False)  # what check() drops (absent here: nothing to restore)


def test_check_calls_them_ok_with_the_note(megatron_core, engine, monkeypatch) -> None:
    monkeypatch.setenv("FL_PATCH_PACKS", "none")
    monkeypatch.setenv("MG_FL_PREFER", "kunlunxin")
    for name in NAMES:
        fl_patch.register(f"{A2A}.{name}", f"fltest_plugin.deepep.{name}", vendor="kunlunxin")
    # A name that does not exist at all still needs create=True.
    fl_patch.register(f"{A2A}.no_such_name", "fltest_plugin.deepep.fused_combine", vendor="kunlunxin")
    _check_restores_its_environment(monkeypatch)
    report = check_module.check(activation=False)
    by_name = {r.target.rpartition(".")[2]: r for r in report.results}
    for name in NAMES[:3]:
        result = by_name[name]
        assert result.level == "ok", result.findings
        assert [f.message for f in result.findings if f.level == "note"] == [
            "upstream had None here (upstream defines it only when `HAVE_DEEP_EP` "
            "(an optional dependency that is missing here))"
        ]
    assert by_name["HAVE_DEEP_EP"].level == "ok"
    assert by_name["no_such_name"].level == "error"


VIT_SPECS = "megatron.core.models.vision.vit_layer_specs"


def test_a_mock_upstream_bound_for_a_missing_package_is_replaced_and_checked_ok(
    megatron_core, engine, monkeypatch
) -> None:
    """Without TE, megatron binds ``TEDotProductAttention`` in ``vit_layer_specs`` unconditionally to
    ``class TEDotProductAttention(te.pytorch.DotProductAttention)`` with ``te = MagicMock()``: a mock, not a
    class. A vendor's class is installed there (no fit check against a mock's ``*args, **kwargs``), the
    record and ``--check`` say why; a real function of the same module is still held to its signature."""
    from unittest import mock

    monkeypatch.setenv("FL_PATCH_PACKS", "none")
    monkeypatch.setenv("MG_FL_PREFER", "kunlunxin")
    impl = "fl_patch.impls.te.modules.TEDotProductAttention"
    fl_patch.register(f"{VIT_SPECS}.TEDotProductAttention", impl, vendor="kunlunxin")
    # not a mock: a function whose callers pass arguments this impl cannot take -> refused as ever
    fl_patch.register(
        f"{VIT_SPECS}.get_vit_layer_with_local_spec", "fltest_plugin.deepep.fused_combine", vendor="kunlunxin"
    )
    _check_restores_its_environment(monkeypatch)
    report = check_module.check(activation=False)
    by_name = {r.target.rpartition(".")[2]: r for r in report.results}
    attention = by_name["TEDotProductAttention"]
    assert attention.level == "ok", attention.findings
    assert "upstream had a unittest.mock stand-in here (a package it needs is not installed)" in [
        f.message for f in attention.findings if f.level == "note"
    ]
    with fresh_modules([VIT_SPECS]):
        fl_patch.install()
        specs = importlib.import_module(VIT_SPECS)
        records = {r.target.rpartition(".")[2]: r for r in fl_patch.report()}
        record = records["TEDotProductAttention"]
        assert record.status is Status.APPLIED and "unittest.mock stand-in" in record.detail, record.detail
        from fl_patch.impls.te import modules as te_modules

        assert specs.TEDotProductAttention is te_modules.TEDotProductAttention
        assert records["get_vit_layer_with_local_spec"].status is not Status.APPLIED
        fl_patch.uninstall()
        assert isinstance(specs.TEDotProductAttention, mock.NonCallableMock)  # upstream's stand-in is back


ROPE_HOME = "megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb"
ROPE_REEXPORT = "megatron.core.models.common.embeddings.rotary_pos_embedding.apply_rotary_pos_emb"


def _rope_impl(*args, **kwargs):
    return fl_patch.original(ROPE_HOME)(*args, **kwargs)


def test_a_plugins_re_export_target_is_patched_and_said_with_its_home(megatron_core, engine) -> None:
    """rotary_pos_embedding binds rope_utils' function; attention.py imports it from rope_utils. A plugin patching
    the re-export alone leaves attention's upstream: the engine patches it as registered and says so once, naming
    the home; registering the home as well (both names) reaches attention and says nothing."""
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.transformer import attention

    upstream = rope_utils.apply_rotary_pos_emb
    fl_patch.register(ROPE_REEXPORT, _rope_impl)
    with pytest.warns(fl_patch.FlPatchWarning) as said:
        fl_patch.install()
    messages = [str(w.message) for w in said if "re-export" in str(w.message)]
    assert messages == [
        f"fl_patch: {ROPE_REEXPORT} is patched, but it is a re-export of {ROPE_HOME}: code that reaches it through "
        f"{ROPE_HOME.rpartition('.')[0]} (that module's own calls, modules that import it from there) keeps "
        f"upstream's (register {ROPE_HOME}, which reaches every name bound to it)"
    ], messages
    record = {r.target: r for r in fl_patch.report()}[ROPE_REEXPORT]
    assert record.status is Status.APPLIED and f"a re-export of {ROPE_HOME}" in record.detail, record.detail
    assert attention.apply_rotary_pos_emb is upstream  # what the warning is about

    fl_patch.uninstall()
    fl_patch.register(ROPE_HOME, _rope_impl)  # both names: meant, and reaching megatron's callers
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl_patch.FlPatchWarning)
        fl_patch.install()
    assert attention.apply_rotary_pos_emb is not upstream
    assert {r.target: r for r in fl_patch.report()}[ROPE_REEXPORT].status is Status.APPLIED
