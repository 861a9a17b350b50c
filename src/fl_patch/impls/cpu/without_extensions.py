"""megatron-core without flash-attn or Transformer Engine, or from the wheel: upstream problems fixed always.

Registered by the CPU pack (``registry.py``, vendor ``cpu``). Not CPU problems: each shows wherever
flash-attn / Transformer Engine are absent, or with the megatron-core wheel; the pack fixes them because on a
machine without a GPU they are always absent. Each impl's docstring gives Why (the upstream line), How, the
upstream reference (megatron-core 0.19.2) and when it can be dropped.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import fl_patch
from fl_patch.impls._compat import warn_if_unverified

__all__ = ["checkpoint_without_output_init", "compile_helpers", "get_fa_version"]

warn_if_unverified()

_UTILS = "megatron.core.utils"
_DATASETS_UTILS = "megatron.core.datasets.utils"
_HELPERS = "megatron.core.datasets.helpers_cpp"
_RANDOM = "megatron.core.tensor_parallel.random"


def get_fa_version() -> Any:
    """Patch for ``megatron.core.utils.get_fa_version``.

    Why: upstream (``utils.py`` lines 356-373) imports ``flash_attn`` unguarded to read its
    version, so ``is_fa_min_version("2.7.3")`` raises ``ModuleNotFoundError`` where
    flash-attn is not installed, instead of answering False. Megatron-LM's own tests call it
    in ``pytest.mark.skipif`` at import time (``tests/unit_tests/inference/engines/
    test_dynamic_engine.py`` and others): the whole module fails to collect.
    How: what upstream's ``get_te_version`` does for an absent Transformer Engine: version
    ``0.0.0``, so every ``is_fa_min_version`` check is False. With flash-attn installed,
    upstream runs.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/utils.py``.
    Drop when: upstream guards the import (as it does for TE).
    """
    if importlib.util.find_spec("flash_attn") is not None:
        return fl_patch.original(f"{_UTILS}.get_fa_version")()
    from packaging.version import Version

    return Version("0.0.0")


def checkpoint_without_output_init(self: Any, fp8: Any = False, *args: Any, **kwargs: Any) -> None:
    """Patch for ``megatron.core.tensor_parallel.random.CheckpointWithoutOutput.__init__``.

    Why: upstream sets ``self.fp8 = fp8 is not None`` (``random.py`` line 740), so the
    default ``fp8=False`` (every caller in ``transformer_layer.py``, ``moe/experts.py``)
    means "fp8 on", and ``CheckpointWithoutOutputFunction.forward`` calls
    ``FP8GlobalStateManager.is_fp8_enabled()`` (line 693), a Transformer Engine name that
    is only imported when TE is: ``NameError`` in the first forward pass with
    ``recompute_modules`` such as ``layernorm`` or ``moe_act`` and no TE.
    How: where TE is not installed, no fp8 was asked for when ``fp8`` is ``None`` or
    ``False``: ``self.fp8`` is False and recompute runs without TE's contexts (what it does
    with TE and fp8 off, minus TE's bookkeeping). An fp8 request without TE raises,
    saying so. With TE installed, upstream runs unchanged.
    Main's ``ckpt_manager`` / ``retain_input_tensors`` reach upstream in ``args``/``kwargs``,
    as the caller passed them (nothing the caller did not pass).
    Upstream reference: megatron-core 0.19.2, ``megatron/core/tensor_parallel/random.py``,
    ``CheckpointWithoutOutput``; main (0.20) adds two parameters.
    Drop when: upstream tests ``fp8`` for truth and guards the TE names.
    """
    fl_patch.original(f"{_RANDOM}.CheckpointWithoutOutput.__init__")(self, fp8, *args, **kwargs)
    if getattr(sys.modules[_RANDOM], "HAVE_TE", False):
        return
    if fp8 is None or fp8 is False:
        self.fp8 = False
        return
    raise ValueError(
        f"CheckpointWithoutOutput(fp8={fp8!r}): fp8 activation recompute needs Transformer Engine, "
        "which is not installed (fl_patch CPU pack)"
    )


def compile_helpers() -> None:
    """Patch for ``megatron.core.datasets.utils.compile_helpers``.

    Why: upstream (``datasets/utils.py`` lines 20-30) runs ``make -C megatron/core/datasets``
    and calls ``sys.exit(1)`` when it fails. The megatron-core wheel ships the built
    ``helpers_cpp`` extension but no ``Makefile``, so ``make`` fails and the process exits:
    Megatron-LM's ``examples/run_simple_mcore_train_loop.py`` calls it on rank 0 before
    building its dataset, and dies there. (A wheel problem, not a CPU one: a GPU machine
    with the wheel hits it too. ``initialize._compile_dependencies``, the training pack's
    patch, is the same problem one level up.)
    How: when ``megatron.core.datasets.helpers_cpp`` is importable there is nothing to
    compile; otherwise (a source checkout without the built extension) upstream runs.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/datasets/utils.py``.
    Drop when: upstream skips the build when the extension is already there.
    """
    if importlib.util.find_spec(_HELPERS) is None:
        fl_patch.original(f"{_DATASETS_UTILS}.compile_helpers")()
