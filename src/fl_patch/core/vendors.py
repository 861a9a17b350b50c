"""Which vendor's impl runs: ``MG_FL_PREFER``, else the detected platform, then ``default``.

``MG_FL_PREFER`` is FlagScale's variable. Here it may be a priority list
(``musa,default``); the detected platform and ``default`` are appended after the
user's entries, so ``MG_FL_PREFER=flaggems`` on a GPU machine means
``flaggems, cuda, default``: the user's choice first, then what the machine needs.

Detection is lazy: it runs when the first patch is about to be applied (by then
the program is importing megatron, which imports torch), never at interpreter
start-up, so a process that never imports megatron never imports torch for it. A
plugin tree may bring its own detection (FlagScale's ``get_platform()``): its answer goes
before fl_patch's (``VendorChoice.add_hint``).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable, Collection, Iterable

from fl_patch.core.errors import PlatformNotReady, ProblemSink, is_stop_request

__all__ = ["DEFAULT_VENDOR", "VendorChoice", "detect_platform", "vendor_priority"]

DEFAULT_VENDOR = "default"

# Vendor torch extensions, checked by presence (find_spec), not imported here.
_EXTENSION_PLATFORMS = (("torch_npu", "npu"), ("torch_musa", "musa"), ("torch_mlu", "mlu"))


def interpreter_shutting_down() -> bool:
    """Whether the interpreter is past the program: atexit handlers (or later) are running.

    ``threading._shutdown`` (run before atexit handlers, when threading was imported) sets
    ``_SHUTTING_DOWN``; from then on an import that starts a thread pool (torch's own
    ``import torch``) fails.
    """
    threading = sys.modules.get("threading")
    return bool(getattr(threading, "_SHUTTING_DOWN", False)) or sys.is_finalizing()


def detect_platform() -> str:
    """The accelerator this process would run on: npu, musa, mlu, cuda, xpu or cpu."""
    for module_name, platform in _EXTENSION_PLATFORMS:
        if module_name in sys.modules or importlib.util.find_spec(module_name) is not None:
            return platform
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "cuda"):
        import torch
    assert torch is not None  # imported just above when it was not loaded
    if torch.cuda.is_available():
        return "cuda"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return "xpu"
    return "cpu"


def vendor_priority(prefer: Iterable[str], platform: str, hinted: Iterable[str] = ()) -> tuple[str, ...]:
    """The ordered vendor list: preferred vendors, hinted platforms, the detected platform, ``default``.

    ``hinted`` comes from a plugin tree's own platform detection (FlagScale's
    ``get_platform()``, which names vendors fl_patch's detection cannot, such as
    ``kunlunxin`` when ``XPU=1``).
    """
    ordered: list[str] = []
    for vendor in (*prefer, *hinted, platform, DEFAULT_VENDOR):
        vendor = vendor.strip().lower()
        if vendor and vendor not in ordered:
            ordered.append(vendor)
    return tuple(ordered)


class VendorChoice:
    """The vendor priority list of this installation: read once, when it is first needed."""

    def __init__(self, problems: ProblemSink) -> None:
        self._problems = problems
        self._prefer: tuple[str, ...] = ()
        self._hints: list[Callable[[], str | None]] = []
        self._platform: str | None = None
        self._vendors: tuple[str, ...] | None = None

    def configure(self, prefer: tuple[str, ...]) -> None:
        self._prefer = prefer
        self._vendors = None

    def add_hint(self, hint: Callable[[], str | None]) -> None:
        """A platform detector of a plugin tree's own, asked before fl_patch's."""
        self._hints.append(hint)
        if self._vendors is not None:
            before, self._vendors = self._vendors, None
            if self.vendors() != before:
                self._problems.problem(
                    f"fl_patch: the vendor list became {', '.join(self.vendors())} once a plugin tree's platform "
                    f"detection was found; patches applied before used {', '.join(before)}"
                )

    @property
    def detected(self) -> bool:
        return self._vendors is not None

    def decided_without_detection(self, among: Collection[str] | None) -> bool:
        """Whether a target with registrations for ``among`` gets its order without the platform:
        each of them is ``default`` or named in ``MG_FL_PREFER`` (the one rule ``vendors`` and the
        report both use, so a record never says "waiting for the platform" for such a target)."""
        return among is not None and set(among) <= {DEFAULT_VENDOR, *self._prefer}

    def vendors(self, among: Collection[str] | None = None) -> tuple[str, ...]:
        """The priority list. ``among``: the vendors a target has registrations for. When each of
        them is ``default`` or named in ``MG_FL_PREFER``, their order is the user's whatever the
        machine is, so the platform is not detected for it: detecting imports torch, and a
        program that patches ``json.dumps`` and never imports torch must not get torch for it.
        Raises ``PlatformNotReady`` while torch itself is importing (a target
        inside torch, met during torch's own import): detecting the accelerator then would read a
        half-built torch and guess wrong, so the target is retried once torch has loaded."""
        if self._vendors is not None:
            return self._vendors
        if self.decided_without_detection(among):
            return vendor_priority(self._prefer, "")
        # Only an answer is cached, never a guess: a detection that failed or was interrupted
        # (Ctrl-C while it imported torch, then the program retried) is asked again next time,
        # or a retry would run for the rest of the process on 'cpu' impls on a GPU machine.
        platform, settled = self._platform, True
        if platform is None:
            torch = sys.modules.get("torch")
            spec = getattr(torch, "__spec__", None)
            if isinstance(torch, types.ModuleType) and getattr(spec, "_initializing", False):
                raise PlatformNotReady("torch is still importing", blocker="torch")
            if not isinstance(torch, types.ModuleType) and interpreter_shutting_down():
                # A target first imported by an atexit handler, in a process that never loaded
                # torch: importing torch now fails (its thread pool), and nothing of this process
                # ran on an accelerator. Said by nobody: it is no problem of the patches.
                platform = "cpu"
            else:
                try:
                    platform = detect_platform()
                except Exception as exc:  # (detection must never break an import)
                    if is_stop_request(exc):
                        raise
                    platform, settled = "cpu", False
                    self._problems.problem(f"fl_patch: could not detect the platform ({exc!r}); assuming 'cpu'")
        hinted, hints_settled = self._hinted()
        vendors = vendor_priority(self._prefer, platform, hinted)
        if settled:
            self._platform = platform
            if hints_settled:
                self._vendors = vendors
        return vendors

    def _hinted(self) -> tuple[list[str], bool]:
        """The hinted platforms, and whether every hint answered (a failed one is asked again next time)."""
        hinted, settled = [], True
        for hint in self._hints:
            try:
                platform = hint()
            except Exception as exc:  # (a plugin tree's detection must not break an import)
                if is_stop_request(exc):
                    raise
                settled = False
                self._problems.problem(f"fl_patch: a plugin tree's platform detection failed: {exc!r}; it is ignored")
                continue
            if platform:
                hinted.append(platform)
        return hinted, settled

    def reset(self) -> None:
        self._platform = None
        self._vendors = None
