"""MG_FL_PREFER and platform detection (fl_patch.core.vendors)."""

from __future__ import annotations

import pytest
import torch

import fl_patch
from fl_patch.activation.settings import Settings
from fl_patch.core.vendors import detect_platform, vendor_priority


def test_detected_platform_on_this_machine() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert detect_platform() == expected


@pytest.mark.parametrize(
    ("prefer", "platform", "expected"),
    [
        ("", "cpu", ("cpu", "default")),
        ("musa", "cpu", ("musa", "cpu", "default")),
        ("MUSA, Default", "cpu", ("musa", "default", "cpu")),
        ("flaggems", "cuda", ("flaggems", "cuda", "default")),
        ("cpu,cpu", "cpu", ("cpu", "default")),
        (" , ,", "npu", ("npu", "default")),
    ],
)
def test_priority_list(prefer: str, platform: str, expected: tuple[str, ...]) -> None:
    settings = Settings.from_environ({"MG_FL_PREFER": prefer})
    assert vendor_priority(settings.prefer, platform) == expected


def test_unknown_preferred_vendor_warns_once_naming_it(engine, monkeypatch) -> None:
    fl_patch.register("megatron.core.utils.divide", "impl.divide", vendor="musa")
    monkeypatch.setenv("MG_FL_PREFER", "kunlun,musa")
    # The check runs once every registration source has loaded: at install() when megatron
    # is already imported, else at the first megatron import (run_deferred stands for it).
    with pytest.warns(
        fl_patch.FlPatchWarning, match=r"vendor 'kunlun', which no registration provides \(registered vendors: musa\)"
    ):
        fl_patch.install()
        engine.run_deferred()
    (record,) = fl_patch.report()
    assert record.chosen_vendor == "musa"  # the known vendor in the list still applies


def test_unknown_preferred_vendor_is_an_error_in_strict_mode(engine, monkeypatch) -> None:
    fl_patch.register("megatron.core.utils.divide", "impl.divide", vendor="musa")
    monkeypatch.setenv("MG_FL_PREFER", "kunlun")
    monkeypatch.setenv("FL_PATCH_STRICT", "1")
    with pytest.raises(fl_patch.FlPatchError, match="kunlun"):
        fl_patch.install()
        engine.run_deferred()
