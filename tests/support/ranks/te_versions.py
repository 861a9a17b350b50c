"""Run under ``python -m fl_patch``: megatron's TE-version helpers, as JSON (``transformer_engine`` may be a stand-in)."""

from __future__ import annotations

import json
import sys
import types

from megatron.core import utils
from megatron.core.distributed.fsdp.src.megatron_fsdp import utils as fsdp_utils

import fl_patch
from fl_patch.impls.cpu.te_version import STAND_IN_MARK, installed_te_version

if "--stand-in" in sys.argv:
    # What a transformer_engine stand-in does once megatron is imported: the name imports, it has a
    # version attribute, and it says it is a stand-in. Upstream's helpers then answer 9.9.9.
    stand_in = types.ModuleType("transformer_engine")
    setattr(stand_in, STAND_IN_MARK, True)
    stand_in.__version__ = "9.9.9"  # type: ignore[attr-defined]
    sys.modules["transformer_engine"] = stand_in
    utils._te_version = None  # upstream's cache, filled by megatron's imports before the stand-in existed

print(
    json.dumps(
        {
            "installed": str(installed_te_version()),
            "core": str(utils.get_te_version()),
            "core_min_1_0": utils.is_te_min_version("1.0.0"),
            "fsdp": str(fsdp_utils.get_te_version()),
            "fsdp_min_1_0": fsdp_utils.is_te_min_version("1.0.0"),
            "upstream_core": str(fl_patch.original("megatron.core.utils.get_te_version")()),  # type: ignore[operator]
        }
    )
)
