"""What the GPU's clock and power did while a bench timed its steps (``nvidia-smi``, sampled every 100 ms).

Why: two runs of the same program can differ by the card, not the code. An H100 SXM and an H200 both cap
board power at 700 W, and a card at its cap lowers its SM clock; fp8 GEMMs move twice the operands a cycle
of bf16's, so an fp8 step may run at a lower clock than the bf16 step it is compared with. A step-time
ratio alone cannot say which; the clock and power over the timed steps can.

How: ``nvidia-smi --query-gpu=... -lms 100`` as a child process; a thread reads its lines with their
arrival time. :meth:`Sampler.summary` keeps the samples that arrived inside the windows the caller marked
(:meth:`Sampler.window`) and gives medians and the throttle reasons seen. Where ``nvidia-smi`` is missing
the sampler records nothing and the summary says so; the bench runs on either way.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time
from collections import Counter

__all__ = ["Sampler"]

_FIELDS = "clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active"
# nvidia-smi's bits of clocks_throttle_reasons.active, named as its documentation names them
_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


class Sampler:
    """Samples of one GPU's clocks and power, kept only inside the windows marked with :meth:`window`."""

    def __init__(self, gpu: int = 0, period_ms: int = 100) -> None:
        # gpu: nvidia-smi's index, which is CUDA's where CUDA_VISIBLE_DEVICES is unset and the cards are alike
        # (the one-GPU benches this serves)
        self._samples: list[tuple[float, list[str]]] = []
        self._windows: list[tuple[float, float]] = []
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        exe = shutil.which("nvidia-smi")
        if exe is None:
            return
        self._proc = subprocess.Popen(
            [exe, f"--id={gpu}", f"--query-gpu={_FIELDS}", "--format=csv,noheader,nounits", f"-lms={period_ms}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, name="gpu-clock-sampler", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self._samples.append((time.perf_counter(), [part.strip() for part in line.split(",")]))

    @property
    def received(self) -> int:
        """How many samples have arrived so far, inside the windows or not."""
        return len(self._samples)

    def window(self, start: float, end: float) -> None:
        """Keep the samples that arrive between ``start`` and ``end`` (``time.perf_counter()`` values)."""
        self._windows.append((start, end))

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def summary(self) -> dict[str, object]:
        """Medians of the SM clock (MHz), memory clock, power (W) and temperature over the marked windows,
        the power limit, and how many samples saw each throttle reason."""
        self.stop()
        if self._proc is None:
            return {"samples": 0, "why": "nvidia-smi not found"}
        inside = [
            values
            for at, values in self._samples
            if len(values) == 6 and any(start <= at <= end for start, end in self._windows)
        ]
        if not inside:
            return {"samples": 0, "why": f"no sample inside the timed steps ({len(self._samples)} in all)"}

        def column(index: int) -> list[float]:  # (a field nvidia-smi cannot read is "[N/A]": left out)
            return [float(v[index]) for v in inside if _number(v[index])]

        def median(index: int) -> float | None:
            numbers = column(index)
            return statistics.median(numbers) if numbers else None

        reasons: Counter[str] = Counter()
        for values in inside:
            bits = int(values[5], 16) if values[5].startswith("0x") else 0
            reasons.update(name for bit, name in _REASONS.items() if bits & bit)
        return {
            "samples": len(inside),
            "sm_clock_mhz_median": median(0),
            "sm_clock_mhz_min": min(column(0), default=None),
            "mem_clock_mhz_median": median(1),
            "power_w_median": median(2),
            "power_limit_w": median(3),
            "temperature_c_median": median(4),
            "throttle_reasons": dict(reasons),
        }


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
