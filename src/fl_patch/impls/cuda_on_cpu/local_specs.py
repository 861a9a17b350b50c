"""Transformer Engine layer specs -> megatron-core's local specs, for the CUDA-on-CPU transfer (pack ``cuda_on_cpu``).

Registered by ``cuda_on_cpu/registry.py`` (vendor ``cpu``, with the transfer on): the Transformer Engine
layer-spec providers build megatron-core's local spec instead (same maths: layer norms and linears as separate
modules instead of TE's fused ones; no fp8) when TE is not installed and the TE-compatible layers (pack ``te``)
are not behind the module's ``TESpecProvider`` either. Options that only TE has raise, naming the option. The one
line the transfer prints says so. (The fixes for megatron-core without flash-attn / TE that apply always moved to
the CPU pack: ``cpu/without_extensions.py``.)

Each impl's docstring gives Why (the upstream line), How, the upstream reference
(megatron-core 0.19.2) and when it can be dropped.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import fl_patch
from fl_patch.impls._compat import warn_if_unverified

__all__ = [
    "bert_layer_with_transformer_engine_submodules",
    "gpt_decoder_layer_specs",
    "gpt_layer_with_transformer_engine_submodules",
    "gpt_mlp_module_spec",
    "gpt_moe_module_spec",
    "gpt_mtp_block_spec",
]

warn_if_unverified()

_GPT_SPECS = "megatron.core.models.gpt.gpt_layer_specs"
_MOE_SPECS = "megatron.core.models.gpt.moe_module_specs"
_BERT_SPECS = "megatron.core.models.bert.bert_layer_specs"


# --------------------------------------------------------------------------- TE layer specs -> local
def _have_te(module: str) -> bool:
    """TE itself, or fl_patch's TE-compatible modules (``te/modules.py``) behind the module's ``TESpecProvider``.

    With the TE-compatible modules registered (the CPU pack, where TE is not installed), upstream's TE
    spec functions build TE's module tree on them, so these patches let upstream run."""
    namespace = sys.modules[module]
    if getattr(namespace, "HAVE_TE", False):
        return True
    provider = getattr(namespace, "TESpecProvider", None)
    return getattr(provider, "__module__", "") == "fl_patch.impls.te.modules"


def _refuse_te_only(spec: str, **options: object) -> None:
    given = [name for name, value in options.items() if value]
    if given:
        raise ValueError(
            f"{spec}: {', '.join(given)} need Transformer Engine, which is not installed; "
            "fl_patch's CPU pack builds the TE spec on TE-compatible plain-torch modules (or the local spec), "
            "which have no such option"
        )


def _as_received(target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, inspect.BoundArguments]:
    """The original and the call as received, bound to the installed release's signature (defaults filled).

    Each spec function below changes one or two arguments and passes on the rest. Binding to the
    original's own signature passes exactly the parameters this release has: an option a later release
    added is neither sent to an earlier one nor dropped from a later one (a bad call raises upstream's
    ``TypeError``).
    """
    original = fl_patch.original(target)
    bound = inspect.signature(original).bind(*args, **kwargs)
    bound.apply_defaults()
    return original, bound


# Options of the TE layer spec that only TE can honour (not every release has each).
_TE_ONLY_OPTIONS = ("use_te_op_fuser", "use_te_activation_func", "use_grouped_gemm_for_dense_mlp")


def _te_only_options(bound: inspect.BoundArguments) -> dict[str, object]:
    return {name: bound.arguments[name] for name in _TE_ONLY_OPTIONS if name in bound.arguments}


def gpt_layer_with_transformer_engine_submodules(*args: Any, **kwargs: Any) -> Any:
    """Patch for ``megatron.core.models.gpt.gpt_layer_specs.get_gpt_layer_with_transformer_engine_submodules``.

    Why: without Transformer Engine, ``TESpecProvider`` is ``None`` in that module
    (``gpt_layer_specs.py`` line 54) and upstream calls it (line 233): ``TypeError:
    'NoneType' object is not callable`` from ``get_gpt_layer_with_transformer_engine_spec()``,
    the spec most of Megatron-LM's tests and scripts ask for (``test_attention.py``,
    ``test_transformer_layer.py``, ``pretrain_gpt.py`` without ``--transformer-impl local``).
    How: with TE absent, megatron-core's own local spec with the same model options
    (``get_gpt_layer_local_submodules``, given every option it has): the same computation with
    the layer norms as their own modules (``input_layernorm``, ``pre_mlp_layernorm``) instead of
    fused into TE's linears, so parameter names differ from a TE model's; no fp8. Options only TE
    has (``use_te_op_fuser``, ``use_te_activation_func``, ``use_grouped_gemm_for_dense_mlp``)
    raise; ``mla_down_proj_fusion`` falls back to the unfused MLA, as upstream does for a
    backend without the fused module. Said once by the transfer's line. With TE
    installed, or fl_patch's TE-compatible modules behind ``TESpecProvider``, upstream runs.
    The call is passed on as received (``_as_received``): 0.17 has no ``use_grouped_gemm_for_dense_mlp``.
    Upstream reference: megatron-core 0.17.1-0.19.2 and main, ``megatron/core/models/gpt/gpt_layer_specs.py``.
    Drop when: upstream falls back to the local spec itself when TE is absent.
    """
    original, bound = _as_received(f"{_GPT_SPECS}.get_gpt_layer_with_transformer_engine_submodules", args, kwargs)
    if _have_te(_GPT_SPECS):
        if not getattr(sys.modules[_GPT_SPECS], "HAVE_TE", False):
            _refuse_te_only("get_gpt_layer_with_transformer_engine_spec", **_te_only_options(bound))
        return original(*bound.args, **bound.kwargs)
    _refuse_te_only("get_gpt_layer_with_transformer_engine_spec", **_te_only_options(bound))
    local = sys.modules[_GPT_SPECS].get_gpt_layer_local_submodules
    takes = inspect.signature(local).parameters
    return local(**{name: value for name, value in bound.arguments.items() if name in takes})


def gpt_mlp_module_spec(*args: Any, **kwargs: Any) -> Any:
    """Patch for ``megatron.core.models.gpt.gpt_layer_specs.get_mlp_module_spec``.

    Why: ``use_te=True`` (its default) builds ``TESpecProvider()`` (line 514), ``None``
    without TE: ``TypeError: 'NoneType' object is not callable``.
    How: with TE absent, ``use_te=False``: the local MLP spec (``use_te_op_fuser``, TE
    only, raises); the rest as received. See :func:`gpt_layer_with_transformer_engine_submodules`.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/models/gpt/gpt_layer_specs.py``.
    Drop when: upstream falls back to the local spec itself.
    """
    original, bound = _as_received(f"{_GPT_SPECS}.get_mlp_module_spec", args, kwargs)
    if not _have_te(_GPT_SPECS) and bound.arguments.get("use_te"):
        _refuse_te_only("get_mlp_module_spec", **_te_only_options(bound))
        bound.arguments["use_te"] = False
    return original(*bound.args, **bound.kwargs)


def gpt_decoder_layer_specs(*args: Any, **kwargs: Any) -> Any:
    """Patch for ``megatron.core.models.gpt.gpt_layer_specs.get_gpt_decoder_layer_specs`` (and so ``get_gpt_decoder_block_spec``).

    Why: ``use_transformer_engine=True`` takes ``TENorm`` (``None`` without TE) as the
    block's final norm and the TE layer specs (lines 577-600).
    How: with TE absent, ``use_transformer_engine=False``: the local layer specs and norm; the
    rest as received. See :func:`gpt_layer_with_transformer_engine_submodules`.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/models/gpt/gpt_layer_specs.py``.
    Drop when: upstream falls back to the local spec itself.
    """
    original, bound = _as_received(f"{_GPT_SPECS}.get_gpt_decoder_layer_specs", args, kwargs)
    if not _have_te(_GPT_SPECS):
        bound.arguments["use_transformer_engine"] = False
    return original(*bound.args, **bound.kwargs)


def gpt_mtp_block_spec(*args: Any, **kwargs: Any) -> Any:
    """Patch for ``megatron.core.models.gpt.gpt_layer_specs.get_gpt_mtp_block_spec``.

    Why: ``use_transformer_engine=True`` builds ``TESpecProvider()`` (lines 731-738),
    ``None`` without TE.
    How: with TE absent, the local backend (``use_transformer_engine=False``); the rest as received.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/models/gpt/gpt_layer_specs.py``.
    Drop when: upstream falls back to the local spec itself.
    """
    original, bound = _as_received(f"{_GPT_SPECS}.get_gpt_mtp_block_spec", args, kwargs)
    if not _have_te(_GPT_SPECS):
        bound.arguments["use_transformer_engine"] = False
    return original(*bound.args, **bound.kwargs)


def gpt_moe_module_spec(*args: Any, **kwargs: Any) -> Any:
    """Patch for ``megatron.core.models.gpt.moe_module_specs.get_moe_module_spec``.

    Why: ``use_te=True`` (its default) builds ``TESpecProvider()`` (line 57), whose modules
    are ``None`` without TE: the experts cannot be built.
    How: with TE absent, ``use_te=False``: megatron-core's local experts; the rest as received.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/models/gpt/moe_module_specs.py``.
    Drop when: upstream falls back to the local spec itself.
    """
    original, bound = _as_received(f"{_MOE_SPECS}.get_moe_module_spec", args, kwargs)
    if not _have_te(_MOE_SPECS):
        bound.arguments["use_te"] = False
    return original(*bound.args, **bound.kwargs)


def bert_layer_with_transformer_engine_submodules() -> Any:
    """Patch for ``megatron.core.models.bert.bert_layer_specs.get_bert_layer_with_transformer_engine_submodules``.

    Why: without TE upstream raises ``ImportError("Transformer Engine is not installed.
    Please use local Bert layer spec instead.")`` (``bert_layer_specs.py`` line 53).
    How: with TE absent, that local spec's submodules (``bert_layer_local_spec``), as the
    message itself advises. See :func:`gpt_layer_with_transformer_engine_submodules`.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/models/bert/bert_layer_specs.py``.
    Drop when: upstream falls back to the local spec itself.
    """
    if _have_te(_BERT_SPECS):
        return fl_patch.original(f"{_BERT_SPECS}.get_bert_layer_with_transformer_engine_submodules")()
    return sys.modules[_BERT_SPECS].bert_layer_local_spec.submodules
