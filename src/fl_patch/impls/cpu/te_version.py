"""One answer to "which Transformer Engine is installed?" for every TE-version helper of megatron.

Why: megatron asks in several places, each its own way: ``megatron.core.utils.get_te_version``
(``import transformer_engine``, then ``te.__version__`` or the distribution's; 0.0.0 when the
import fails; cached in a module global), ``is_te_min_version`` (through it), and
megatron-fsdp's ``utils.get_te_version`` (``None`` when absent) and ``mixed_precision.TE_VERSION``
(computed at import). Each decides by whether ``import transformer_engine`` succeeds. Where
TE is absent they agree today; but anything importable under that name (a stand-in module that
lets TE-importing test files collect, a half-installed wheel) makes each answer differently,
or claim a TE that cannot run here (megatron then takes TE's code paths: fused kernels, fp8).
How: :func:`installed_te_version` is the one decision: the version of the installed
``transformer-engine`` distribution (its metadata, read without importing it), else the
module's ``__version__`` when a real module is importable, else ``None``. A module that marks
itself ``__fl_patch_stand_in__ = True`` is never TE: it answers ``None`` however it is found.
The patched helpers keep their upstream conventions on top of it: ``megatron.core.utils``
answers ``Version("0.0.0")`` for no TE, megatron-fsdp's ``None``.
Joining a stand-in: a ``transformer_engine`` stand-in sets ``__fl_patch_stand_in__ = True`` and
no ``__version__`` of its own (or one it does not expect anyone to read): every helper then says
"no TE" through :func:`installed_te_version`, however megatron imported it.

Upstream reference: megatron-core 0.19.2 ``megatron/core/utils.py`` (``get_te_version``,
``is_te_min_version``), ``megatron/core/distributed/fsdp/src/megatron_fsdp/utils.py``.
Drop when: megatron asks one helper, keyed on TE's distribution.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys

from packaging.version import Version

__all__ = ["STAND_IN_MARK", "core_get_te_version", "fsdp_get_te_version", "installed_te_version"]

STAND_IN_MARK = "__fl_patch_stand_in__"
"""The attribute a stand-in ``transformer_engine`` module sets to True: it is never taken for TE."""

_DISTRIBUTIONS = ("transformer-engine", "transformer_engine")


_cached: tuple[object, Version | None] | None = None  # (sys.modules' transformer_engine or None, the answer)


def installed_te_version() -> Version | None:
    """The installed Transformer Engine's version, or None (absent, or only a stand-in is importable).

    Cached for the module object under ``sys.modules["transformer_engine"]`` (none, a stand-in, TE): megatron asks on
    hot paths (``is_te_min_version`` in ``moe_utils.unpermute``, once per MoE layer and step), and reading the
    distributions' metadata costs about 0.2 ms a call. A module imported later is another object, so the answer
    follows it; like upstream's own cache, a TE installed into a running process is not seen."""
    global _cached
    module = sys.modules.get("transformer_engine")
    if _cached is None or _cached[0] is not module:
        _cached = (module, _lookup(module))
    return _cached[1]


def _lookup(module: object) -> Version | None:
    if module is not None and getattr(module, STAND_IN_MARK, False):
        return None
    for name in _DISTRIBUTIONS:
        try:
            return Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        if importlib.util.find_spec("transformer_engine") is None:
            return None
    except (ImportError, ValueError):
        return None
    import transformer_engine  # a source install without metadata: upstream reads its __version__ too

    if getattr(transformer_engine, STAND_IN_MARK, False) or not hasattr(transformer_engine, "__version__"):
        return None
    return Version(str(transformer_engine.__version__))


def core_get_te_version() -> Version:
    """Patch for ``megatron.core.utils.get_te_version``: :func:`installed_te_version`, 0.0.0 for none (upstream's convention).

    Every ``is_te_min_version`` answer follows (it calls this by its module global).
    """
    return installed_te_version() or Version("0.0.0")


def fsdp_get_te_version() -> Version | None:
    """Patch for megatron-fsdp's ``utils.get_te_version``: :func:`installed_te_version`, None for none (its convention)."""
    return installed_te_version()
