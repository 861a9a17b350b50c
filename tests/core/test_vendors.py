"""MG_FL_PREFER and platform detection (fl_patch.core.vendors)."""

from __future__ import annotations

import pytest
import torch

import fl_patch
from fl_patch.config.settings import Settings
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


def _flaky(first: BaseException, then: str) -> object:
    """A detector that fails (or is interrupted) the first time it is asked, then answers ``then``."""
    calls: list[int] = []

    def detect() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise first
        return then

    return detect


@pytest.mark.parametrize("first", [RuntimeError("torch half-imported"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_detection_is_asked_again(monkeypatch, first: BaseException) -> None:
    # Ctrl-C while the first patch's detection imported torch, caught by the program, which
    # imports again: the retry must not run on a guess ('cpu') cached from the failed attempt.
    from fl_patch.core import vendors
    from fl_patch.core.errors import ProblemSink

    monkeypatch.setattr(vendors, "detect_platform", _flaky(first, "cuda"))
    choice = vendors.VendorChoice(ProblemSink())
    if isinstance(first, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            choice.vendors()
    else:
        with pytest.warns(fl_patch.FlPatchWarning, match="could not detect the platform"):
            assert choice.vendors() == ("cpu", "default")  # this once: the guess, said
    assert not choice.detected
    assert choice.vendors() == ("cuda", "default")
    assert choice.detected


@pytest.mark.parametrize("first", [RuntimeError("plugin tree half-imported"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_platform_hint_is_asked_again(monkeypatch, first: BaseException) -> None:
    from fl_patch.core import vendors
    from fl_patch.core.errors import ProblemSink

    monkeypatch.setattr(vendors, "detect_platform", lambda: "cpu")
    choice = vendors.VendorChoice(ProblemSink())
    choice.add_hint(_flaky(first, "kunlunxin"))  # type: ignore[arg-type]
    if isinstance(first, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            choice.vendors()
    else:
        with pytest.warns(fl_patch.FlPatchWarning, match="platform detection failed"):
            assert choice.vendors() == ("cpu", "default")
    assert choice.vendors() == ("kunlunxin", "cpu", "default")
