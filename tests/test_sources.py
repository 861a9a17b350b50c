"""Where registrations come from, and only from there (fl_patch.sources)."""

from __future__ import annotations

import sys

import fl_patch
from fl_patch import Status


def test_registry_modules_and_packs_are_loaded_only_when_named(engine, monkeypatch) -> None:
    monkeypatch.setenv("FL_PATCH_REGISTRY", "fltest_lazy.registry")
    monkeypatch.setenv("FL_PATCH_PACKS", "none")
    sys.modules.pop("fltest_lazy.registry", None)
    fl_patch.install()
    sources = {r.source for r in fl_patch.report()}
    assert sources == {"fltest_lazy.registry"}


def test_shipped_cpu_pack_registers_for_vendor_cpu_only(engine, monkeypatch) -> None:
    monkeypatch.setenv("FL_PATCH_PACKS", "cpu")
    fl_patch.install()
    records = fl_patch.report()
    assert records and {r.vendor for r in records} == {"cpu"}
    # the pack's registry, and the shared packs it registers for its own vendor
    sources = {"fl_patch.impls.cpu.registry", "fl_patch.impls.te.registry", "fl_patch.impls.without_te.registry"}
    assert {r.source for r in records} == sources


def test_preferred_vendor_names_are_never_imported(megatron_core, engine, monkeypatch) -> None:
    """MG_FL_PREFER only chooses among registered vendors; it is not a module path."""
    fl_patch.register("megatron.core.utils.divide", "fltest_broken.usable.impl", vendor="musa")
    monkeypatch.setenv("MG_FL_PREFER", "fltest_evil,musa")
    fl_patch.install()
    records = fl_patch.report()
    assert "fltest_evil" not in sys.modules
    assert records[0].chosen_vendor == "musa"
    assert records[0].status is Status.APPLIED  # (megatron.core.utils is loaded: applied at install)
