"""Fault injection: every way a plugin can break, in default and in strict mode.

Default mode: upstream code keeps running, exactly one ``FlPatchWarning`` names the
target, the impl and the cause, and ``report()`` records it. Strict mode
(``FL_PATCH_STRICT=1``): the same message is raised as ``FlPatchError`` at start-up.
The targets are real megatron-core 0.19.2 objects; the broken plugin is synthetic
(``tests/support/plugins/fltest_broken``), since megatron cannot show a broken plugin.
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest
from fault_table import FAULTS as ALL_FAULTS
from fault_table import Fault

import fl_patch
from fl_patch import FlPatchError, FlPatchWarning

from ..conftest import fresh_modules

# The registration faults of the one fault table (bench/fault_matrix.py runs all of it).
FAULTS = [fault for fault in ALL_FAULTS if fault.in_process]


def _upstream(fault: Fault) -> dict[str, object]:
    """Everything in the namespace that holds the target (or its nearest loaded module):
    a failed patch must leave every name there as it was, not only the target's."""
    assert fault.target is not None
    holder_path = fault.target.rpartition(".")[0]
    module_name, attrs = holder_path, []
    while module_name not in sys.modules:  # a missing module, or a class: start from its module
        module_name, _, attr = module_name.rpartition(".")
        attrs.insert(0, attr)
    holder: object = sys.modules[module_name]
    for attr in attrs:  # down to the class that holds it, as far as it exists
        value = vars(holder).get(attr)
        if not isinstance(value, type):
            break
        holder = value
    return dict(vars(holder))


def _unchanged(before: dict[str, object], after: dict[str, object]) -> bool:
    return before.keys() == after.keys() and all(before[k] is after[k] for k in before)


def _fl_patch_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, FlPatchWarning)]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_default_mode_runs_upstream_with_one_warning(megatron_core, engine, fault: Fault) -> None:
    upstream = _upstream(fault)
    fl_patch.register(fault.target, fault.impl)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fl_patch.install()
        # A second module load of the same kind does not repeat the warning.
        engine.apply_loaded_modules()
    (message,) = _fl_patch_warnings(caught)
    assert fault.target in message and fault.impl in message
    assert re.search(fault.cause, message), message
    assert _unchanged(upstream, _upstream(fault))
    (record,) = fl_patch.report()
    assert record.status.value == fault.status
    assert re.search(fault.cause, record.detail)


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_strict_mode_fails_with_the_same_message(megatron_core, engine, monkeypatch, fault: Fault) -> None:
    upstream = _upstream(fault)
    fl_patch.register(fault.target, fault.impl)
    monkeypatch.setenv("FL_PATCH_STRICT", "1")
    with pytest.raises(FlPatchError) as info:
        fl_patch.install()
    assert fault.target in str(info.value) and fault.impl in str(info.value)
    assert re.search(fault.cause, str(info.value))
    assert _unchanged(upstream, _upstream(fault))


def test_strict_failure_at_import_time_fails_that_import(megatron_core, engine, monkeypatch) -> None:
    fl_patch.register("megatron.core.transformer.utils.attention_mask_func", "fltest_broken.import_error.impl")
    monkeypatch.setenv("FL_PATCH_STRICT", "1")
    with fresh_modules(["megatron.core.transformer.utils"]):
        fl_patch.install()
        with pytest.raises(FlPatchError, match="fltest_no_such_dependency"):
            importlib.import_module("megatron.core.transformer.utils")
        assert "megatron.core.transformer.utils" not in sys.modules


def test_default_failure_at_import_time_keeps_the_import_working(megatron_core, engine) -> None:
    fl_patch.register("megatron.core.transformer.utils.attention_mask_func", "fltest_broken.import_error.impl")
    with fresh_modules(["megatron.core.transformer.utils"]):
        fl_patch.install()
        with pytest.warns(FlPatchWarning, match="attention_mask_func"):
            fresh = importlib.import_module("megatron.core.transformer.utils")
        assert fresh.attention_mask_func.__module__ == "megatron.core.transformer.utils"


def test_registry_module_that_fails_to_import(megatron_core, engine, monkeypatch) -> None:
    monkeypatch.setenv("FL_PATCH_REGISTRY", "fltest_broken.registry_raises,fltest_lazy.registry")
    with pytest.warns(
        FlPatchWarning,
        match=r"registry module 'fltest_broken.registry_raises' failed to import: ImportError: registry depends on a missing vendor SDK",
    ):
        fl_patch.install()
    # The other registry still loaded; the broken one contributes nothing, not even the
    # registration it made before failing (half a plugin is worse than none).
    targets = {r.target for r in fl_patch.report()}
    assert "megatron.core.optimizer.clip_grads.get_grad_norm_fp32" in targets
    assert "megatron.core.utils.divide" not in targets
    fl_patch.uninstall()
    monkeypatch.setenv("FL_PATCH_STRICT", "1")
    fl_patch.activation.install._reset_for_tests()
    with pytest.raises(FlPatchError, match=r"fltest_broken\.registry_raises"):
        fl_patch.install()


def _write_distribution(root: Path, name: str, entry_point: str) -> None:
    dist = root / f"{name}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[fl_patch.registries]\nvendor = {entry_point}\n")


def test_entry_points_register_and_a_broken_one_is_reported(megatron_core, engine, monkeypatch, tmp_path) -> None:
    _write_distribution(tmp_path / "good", "fltest_good_vendor", "fltest_ep_registry")
    (tmp_path / "good" / "fltest_ep_registry.py").write_text(
        "from fl_patch import register\nregister('megatron.core.utils.divide', 'fltest_broken.usable.impl', vendor='musa')\n"
    )
    _write_distribution(tmp_path / "bad", "fltest_bad_vendor", "fltest_broken.registry_missing_module")
    monkeypatch.syspath_prepend(str(tmp_path / "good"))
    monkeypatch.syspath_prepend(str(tmp_path / "bad"))
    importlib.invalidate_caches()
    monkeypatch.setenv("FL_PATCH_ENTRY_POINTS", "1")
    with pytest.warns(
        FlPatchWarning,
        match=r"entry point 'vendor = fltest_broken.registry_missing_module' \(fl_patch.registries\) failed: ModuleNotFoundError",
    ):
        fl_patch.install()  # megatron is already imported: deferred sources load now
    assert [r.source for r in fl_patch.report()] == ["fltest_ep_registry"]
    fl_patch.activation.install._reset_for_tests()
    monkeypatch.setenv("FL_PATCH_STRICT", "1")
    with pytest.raises(FlPatchError, match="registry_missing_module"):
        fl_patch.install()


def test_unknown_pack_is_reported(engine, monkeypatch) -> None:
    monkeypatch.setenv("FL_PATCH_PACKS", "cpu,ascend")
    with pytest.warns(FlPatchWarning, match="unknown pack 'ascend'"):
        fl_patch.install()
