"""register() and vendor selection (fl_patch.core.registry)."""

from __future__ import annotations

import warnings

import pytest

import fl_patch
from fl_patch import Status

TARGET = "megatron.core.optimizer.clip_grads.get_grad_norm_fp32"


def test_register_validates_at_once_and_names_the_bad_input(engine) -> None:
    with pytest.raises(ValueError, match=r"invalid target 'megatron\.core\.\.x'"):
        fl_patch.register("megatron.core..x", "pkg.mod.f")
    with pytest.raises(ValueError, match=r"invalid impl 'pkg\.mod\. f'"):
        fl_patch.register(TARGET, "pkg.mod. f")
    with pytest.raises(ValueError, match="invalid impl None"):
        fl_patch.register(TARGET, None)
    with pytest.raises(ValueError, match="invalid vendor"):
        fl_patch.register(TARGET, "pkg.mod.f", vendor="")
    assert fl_patch.report() == []


def test_register_is_lazy_and_records_where_it_was_called(engine) -> None:
    registration = fl_patch.register(TARGET, "no_such_package_anywhere.impl")  # nothing imported yet
    assert registration.source == __name__
    assert registration.where is not None and registration.where[0] == __file__
    assert registration.method_key == "clip_grads.get_grad_norm_fp32"
    (record,) = fl_patch.report()
    assert record.status is Status.WAITING and record.detail == "fl_patch is not installed"


def test_same_target_and_vendor_twice_the_later_wins_with_a_warning(engine) -> None:
    fl_patch.register(TARGET, "first.impl")
    with pytest.warns(fl_patch.FlPatchWarning, match=r"registered twice: second\.impl .* replaces first\.impl"):
        fl_patch.register(TARGET, "second.impl")
    (record,) = fl_patch.report()
    assert record.impl == "second.impl"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fl_patch.register(TARGET, "second.impl")  # the very same registration again: nothing to warn about


def test_impl_object_is_described_by_its_qualified_name(engine) -> None:
    def my_norm(grads_for_norm, norm_type=2, grad_stats_parallel_group=None):
        return 0.0

    registration = fl_patch.register(TARGET, my_norm)
    assert registration.impl is my_norm
    assert registration.impl_name.endswith("test_impl_object_is_described_by_its_qualified_name.<locals>.my_norm")


def _musa_norm(grads_for_norm, norm_type=2, grad_stats_parallel_group=None):
    return 0.0


def test_vendor_priority_selects_and_others_report_the_choice(megatron_core, engine, monkeypatch) -> None:
    fl_patch.register(TARGET, "fltest_plugin.impls.get_grad_norm_fp32")
    fl_patch.register(TARGET, _musa_norm, vendor="MUSA")
    monkeypatch.setenv("MG_FL_PREFER", "musa")
    fl_patch.install()
    records = {r.vendor: r for r in fl_patch.report()}
    assert records["musa"].chosen_vendor == "musa"
    assert records["default"].status is Status.OTHER_VENDOR
    assert records["default"].detail == "vendor 'musa' chosen"
    fl_patch.uninstall()

    monkeypatch.delenv("MG_FL_PREFER")
    fl_patch.install()
    records = {r.vendor: r for r in fl_patch.report()}
    assert records["default"].chosen_vendor == "default"
    assert records["musa"].status is Status.OTHER_VENDOR


def test_a_preferred_vendor_whose_impl_cannot_load_falls_back_to_the_next(megatron_core, engine, monkeypatch) -> None:
    from megatron.core.optimizer import clip_grads

    fl_patch.register(TARGET, "fltest_plugin.impls.get_grad_norm_fp32")
    fl_patch.register(TARGET, "fltest_broken.import_error.impl", vendor="musa")
    monkeypatch.setenv("MG_FL_PREFER", "musa")
    with pytest.warns(fl_patch.FlPatchWarning, match=r"fltest_no_such_dependency.*trying vendor 'default'") as said:
        fl_patch.install()
    assert len([w for w in said if issubclass(w.category, fl_patch.FlPatchWarning)]) == 1
    assert clip_grads.get_grad_norm_fp32.__code__.co_filename.endswith("fltest_plugin/impls.py")
    records = {r.vendor: r for r in fl_patch.report()}
    assert records["musa"].status is Status.IMPL_FAILED and records["musa"].chosen_vendor == "default"
    assert records["default"].status is Status.APPLIED
    assert "vendor 'musa' failed (ModuleNotFoundError" in records["default"].detail
    fl_patch.uninstall()
    assert clip_grads.get_grad_norm_fp32.__code__.co_filename.endswith("megatron/core/optimizer/clip_grads.py")


def test_no_impl_for_the_chosen_vendors_leaves_the_target_upstream(engine, monkeypatch) -> None:
    fl_patch.register(TARGET, "impl.musa_version", vendor="musa")
    fl_patch.install()  # this machine: cpu, then default
    (record,) = fl_patch.report()
    assert record.status is Status.OTHER_VENDOR and record.chosen_vendor is None
    assert "no impl for vendors cpu, default" in record.detail


@pytest.mark.parametrize("disable", [TARGET, "clip_grads.get_grad_norm_fp32", f"other.x, {TARGET}"])
def test_disable_by_target_or_method_key(engine, monkeypatch, disable: str) -> None:
    fl_patch.register(TARGET, "impl.default_version")
    monkeypatch.setenv("FL_PATCH_DISABLE", disable)
    fl_patch.install()
    (record,) = fl_patch.report()
    assert record.status is Status.DISABLED


def test_an_impl_name_with_a_typo_is_refused_with_the_close_name(megatron_core, engine) -> None:
    """``impl="pkg.mod.get_grad_norm_fp23"``: the error names the module and the name it has that was meant,
    in both impl forms (``pkg.mod.attr`` and ``pkg.mod:attr``); a name with nothing close gets no guess."""
    for impl in ("fltest_plugin.impls.get_grad_norm_fp23", "fltest_plugin.impls:get_grad_norm_fp23"):
        fl_patch.register(TARGET, impl)
        with pytest.warns(fl_patch.FlPatchWarning) as said:
            fl_patch.install()
        [message] = [str(w.message) for w in said if "cannot patch" in str(w.message)]
        assert (
            "AttributeError: module 'fltest_plugin.impls' has no attribute 'get_grad_norm_fp23' "
            "(did you mean get_grad_norm_fp32?)"
        ) in message, message
        fl_patch.uninstall()
    fl_patch.register(TARGET, "fltest_plugin.impls.xyzzy")
    with pytest.warns(fl_patch.FlPatchWarning) as said:
        fl_patch.install()
    [message] = [str(w.message) for w in said if "cannot patch" in str(w.message)]
    assert "module 'fltest_plugin.impls' has no attribute 'xyzzy'" in message and "did you mean" not in message
