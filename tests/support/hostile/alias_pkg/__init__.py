"""Registers a module under a second name in sys.modules at import, as megatron-core's
``megatron/core/resharding/nvshmem_copy_service/compat.py`` does for cuda-core
(``sys.modules["cuda.core.experimental._memory"] = importlib.import_module("cuda.core._memory")``).
"""

import importlib
import sys

sys.modules[__name__ + ".experimental"] = importlib.import_module(__name__ + "._new")
