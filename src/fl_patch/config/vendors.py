"""The vendors fl_patch and FlagScale can name: one list, for every place that checks a vendor a user typed.

Detected platforms (``core/vendors.py``), FlagScale's device names, and the shipped packs' own vendors.
An ``MG_FL_PREFER`` entry one slip from one of these (or from a registered vendor) is a typo: said at
start, before any registration of a deferred source could provide it.
"""

from __future__ import annotations

__all__ = ["KNOWN_VENDORS"]

KNOWN_VENDORS: tuple[str, ...] = (
    "default", "cpu", "cuda", "xpu", "npu", "musa", "mlu", "kunlunxin", "gcu", "metax", "iluvatar", "hygon",
    "ascend", "flaggems",
)  # fmt: skip
