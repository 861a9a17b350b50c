"""Which vendor's impl runs: ``MG_FL_PREFER``, else the detected platform, then ``default``.

``MG_FL_PREFER`` is FlagScale's variable. Here it may be a priority list
(``musa,default``); the detected platform and ``default`` are appended after the
user's entries, so ``MG_FL_PREFER=flaggems`` on a GPU machine means
``flaggems, cuda, default``: the user's choice first, then what the machine needs.

Detection is lazy: it runs when the first patch is about to be applied (by then
the program is importing megatron, which imports torch), never at interpreter
start-up, so a process that never imports megatron never imports torch for it.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable

__all__ = ["DEFAULT_VENDOR", "detect_platform", "vendor_priority"]

DEFAULT_VENDOR = "default"

# Vendor torch extensions, checked by presence (find_spec), not imported here.
_EXTENSION_PLATFORMS = (("torch_npu", "npu"), ("torch_musa", "musa"), ("torch_mlu", "mlu"))


def detect_platform() -> str:
    """The accelerator this process would run on: npu, musa, mlu, cuda, xpu or cpu."""
    for module_name, platform in _EXTENSION_PLATFORMS:
        if module_name in sys.modules or importlib.util.find_spec(module_name) is not None:
            return platform
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "cuda"):
        import torch
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
