"""``tests/support/flaggems/gpu_clocks.py`` (the GPU bench's clock and power record) on a stand-in ``nvidia-smi``:
the summary keeps only the samples inside the marked windows, and says why it has none."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ..support.flaggems.gpu_clocks import Sampler

# Two phases: three idle samples (clock 345 MHz, 80 W), then busy ones at the power cap (bit 0x4).
FAKE_SMI = """#!/bin/sh
i=0
while [ $i -lt 3 ]; do echo "345, 2619, 80.50, 700.00, 40, 0x0000000000000001"; i=$((i+1)); sleep 0.05; done
touch "{busy}"
while true; do echo "1620, 2619, 690.00, 700.00, 63, 0x0000000000000004"; sleep 0.05; done
"""


def _fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    busy = tmp_path / "busy"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(FAKE_SMI.format(busy=busy))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    return busy


def test_only_the_samples_inside_the_timed_steps_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    busy = _fake_smi(tmp_path, monkeypatch)
    sampler = Sampler(0)
    deadline = time.monotonic() + 30
    while not (busy.exists() and sampler.received >= 3):  # the idle samples have been written and read
        assert time.monotonic() < deadline, f"the stand-in nvidia-smi: {sampler.received} samples in 30 s"
        time.sleep(0.02)
    start, before = time.perf_counter(), sampler.received
    while sampler.received < before + 3:  # three busy samples inside (a loaded machine may run the stand-in slowly)
        assert time.monotonic() < deadline, f"the stand-in nvidia-smi: {sampler.received} samples in 30 s"
        time.sleep(0.05)
    sampler.window(start, time.perf_counter())
    summary = sampler.summary()
    assert summary["samples"] >= 2, summary  # (one read at the very moment of start may stamp just before it)
    assert summary["sm_clock_mhz_median"] == 1620.0 and summary["sm_clock_mhz_min"] == 1620.0, summary
    assert summary["power_w_median"] == 690.0 and summary["power_limit_w"] == 700.0, summary
    assert summary["throttle_reasons"] == {"sw_power_cap": summary["samples"]}, summary  # no idle sample kept


def test_no_window_and_no_nvidia_smi_are_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch)
    sampler = Sampler(0)
    time.sleep(0.2)
    summary = sampler.summary()
    assert summary["samples"] == 0 and "no sample inside the timed steps" in str(summary["why"]), summary
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert Sampler(0).summary() == {"samples": 0, "why": "nvidia-smi not found"}
