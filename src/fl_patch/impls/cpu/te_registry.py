"""Registrations for megatron-core's Transformer Engine layer spec without TE (``te_modules.py``, ``docs/te_spec.md``).

Why: megatron-core binds its TE classes module by module (``if HAVE_TE: from
...extensions.transformer_engine import TELinear ... else: TELinear = None``, or a ``MagicMock``
subclass where the import is unconditional). Each such name is a module attribute that
fl_patch replaces with the TE-compatible class, so megatron's own spec functions, its
``TESpecProvider`` users (``get_backend("transformer_engine")``, ``get_moe_module_spec``) and its
``isinstance``/``in [TELinear]`` checks (multi-latent attention chooses the down projections'
``parallel_mode`` that way) run unchanged on them.

How: :data:`TE_NAME_TARGETS` lists, per megatron-core module, the TE names it binds at module
level that the GPT, BERT and MoE/MLA paths reach (``tests/test_te_spec.py`` re-derives the list
from the installed megatron-core's source, so a name megatron adds or moves is noticed).
``megatron.core.extensions.transformer_engine`` itself is left alone: it loads while
``megatron.core.tensor_parallel`` is still initialising (``tensor_parallel/layers.py`` imports it),
before the classes here can be built on ``ColumnParallelLinear``; code that imports a TE class from
it directly gets upstream's stand-in, as without fl_patch. Registered for vendor ``cpu`` (the CPU pack), and only where ``transformer_engine`` cannot be
found: with TE installed, nothing here applies and megatron uses TE itself. Strings only; no
import of torch or megatron.

Upstream reference: megatron-core 0.17.1, 0.18.2, 0.19.2 and Megatron-LM main (0.20.0). Drop when: TE (or TE-FL) is installed everywhere
this runs, or megatron-core ships a backend without TE.
"""

from __future__ import annotations

import importlib.util

from fl_patch import register

__all__ = [
    "TE_ALIAS_TARGETS",
    "TE_CLASS_NAMES",
    "TE_MOE_FUSIONS",
    "TE_NAMES_LEFT",
    "TE_NAME_TARGETS",
    "register_te_spec",
    "te_installed",
]

_MOD = "fl_patch.impls.cpu.te_modules"
_MC = "megatron.core"

TE_CLASS_NAMES: tuple[str, ...] = (
    "TENorm",
    "TELinear",
    "TEColumnParallelLinear",
    "TERowParallelLinear",
    "TELayerNormColumnParallelLinear",
    "TEDotProductAttention",
    "TEColumnParallelGroupedLinear",
    "TERowParallelGroupedLinear",
)
"""The TE wrapper classes ``te_modules`` provides (megatron-core's names)."""

_FROM_018 = "megatron-core>=0.18"  # 0.18 renamed the mamba model family "hybrid" (models/, ssm/, modelopt/)
_UNTIL_018 = "megatron-core<0.18"

TE_NAME_TARGETS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    # Its TE class names (and models.backends') are upstream's MagicMock subclasses, bound unconditionally:
    # fl_patch puts no class of another signature there; the provider returns the classes itself.
    ("extensions.transformer_engine_spec_provider", ("TESpecProvider",), None),
    ("models.gpt.gpt_layer_specs", ("TENorm", "TESpecProvider"), None),
    (
        "models.bert.bert_layer_specs",
        ("TEDotProductAttention", "TELayerNormColumnParallelLinear", "TERowParallelLinear"),
        None,
    ),
    ("transformer.attention", ("TELinear",), None),
    ("transformer.attention", ("TENorm",), _FROM_018),
    (
        "transformer.multi_latent_attention",
        ("TEColumnParallelLinear", "TELayerNormColumnParallelLinear", "TELinear"),
        None,
    ),
    ("transformer.experimental_attention_variant.absorbed_mla", ("TEColumnParallelLinear", "TELinear"), None),
    # The other model families' TE specs: the same classes under the same names.
    (
        "models.gpt.heterogeneous.heterogeneous_layer_specs",
        ("TEDotProductAttention", "TELayerNormColumnParallelLinear", "TENorm", "TERowParallelLinear"),
        None,
    ),
    (
        "models.hybrid.hybrid_layer_specs",
        (
            "TEColumnParallelLinear",
            "TEDotProductAttention",
            "TELayerNormColumnParallelLinear",
            "TELinear",
            "TENorm",
            "TERowParallelLinear",
        ),
        _FROM_018,
    ),
    ("models.hybrid.hybrid_block", ("TENorm",), _FROM_018),  # "Hybrid always uses TE"
    ("models.hybrid.hybrid_block", ("TELayerNormColumnParallelLinear",), "megatron-core>=0.19"),
    (
        "models.mamba.mamba_layer_specs",
        (
            "TEColumnParallelLinear",
            "TEDotProductAttention",
            "TELayerNormColumnParallelLinear",
            "TENorm",
            "TERowParallelLinear",
        ),
        _UNTIL_018,
    ),
    ("ssm.mamba_block", ("TENorm",), _UNTIL_018),
    (
        "models.T5.t5_spec",
        (
            "TEColumnParallelLinear",
            "TEDotProductAttention",
            "TELayerNormColumnParallelLinear",
            "TENorm",
            "TERowParallelLinear",
        ),
        None,
    ),
    (
        "models.vision.vit_layer_specs",
        ("TEDotProductAttention", "TELayerNormColumnParallelLinear", "TERowParallelLinear"),
        None,
    ),
    (
        "models.multimodal.llava_spec",
        ("TEDotProductAttention", "TELayerNormColumnParallelLinear", "TENorm", "TERowParallelLinear"),
        None,
    ),
    ("post_training.modelopt.gpt.model_specs", ("TEDotProductAttention",), None),
    ("post_training.modelopt.hybrid.model_specs", ("TEDotProductAttention", "TENorm"), _FROM_018),
    ("post_training.modelopt.mamba.model_specs", ("TEDotProductAttention",), _UNTIL_018),
    # megatron-FSDP marks a TP-duplicated TELinear's parameters (isinstance against this name) in 0.17 only.
    ("distributed.fsdp.mcore_fsdp_adapter", ("TELinear",), _UNTIL_018),
)
"""``(megatron.core submodule, names, requires)``: every module-level TE class name megatron-core binds, with the
releases that bind it (``requires``: a version range, None for every supported release), but those of
:data:`TE_NAMES_LEFT` (a name bound to the replaced upstream ``TESpecProvider`` class, as in ``moe_module_specs``,
follows it: fl_patch rebinds aliases). ``tests/test_te_spec.py`` re-reads each release's source (the installed
megatron-core and the other releases' wheels): a (module, name) bound there must be registered for that release or
left, and one registered for it must be bound there."""

TE_NAMES_LEFT: dict[str, str] = {
    "extensions.transformer_engine": "TE's wrappers themselves (upstream's MagicMock stand-ins without TE); loads "
    "while tensor_parallel initialises, before a class can be built on ColumnParallelLinear",
    "models.backends": "upstream's MagicMock subclasses bound unconditionally; no class of another signature is put there",
    "fp8_utils": "isinstance checks on TE's fp8 paths (under HAVE_TE); fp8 without TE: the CPU pack refuses it by "
    "name (TEFeatureError), the FlagGems pack serves get_fp8_context/get_fp8_recipe (flaggems/fp8.py)",
    "tensor_parallel.inference_layers": "subclasses TE's classes while its body runs: a name replaced after that "
    "changes nothing (inference only)",
    "transformer.heterogeneous.linear_replacements": "subclasses TELayerNormColumnParallelLinear while its body runs "
    "(the 'replace_with_linear' heterogeneous layers stay upstream's)",
    "transformer.moe.moe_layer": "TELinear for latent projections and an isinstance under HAVE_TE; applying here "
    "imports te_modules inside a circular import of megatron's MoE modules",
    "transformer.moe.shared_experts": "as moe_layer: an isinstance under HAVE_TE, inside the MoE modules' circular import",
    "models.multimodal.llava_model": "compares with TEDotProductAttention only 'and HAVE_TE' (False without TE); its "
    "TENorm is a local import",
    "models.vision.clip_vit_model": "binds TENorm only when `import transformer_engine` succeeds; without TE its "
    "torch LayerNorm is fixed in CLIPViTModel.__init__'s defaults (upstream cannot build it)",
    "transformer.transformer_block": "TENorm is reached only as LayerNormImpl (replaced: TE_ALIAS_TARGETS)",
    "models.vision.vit_model": "(main) binds _NORM_IMPL = TENorm at import and asserts HAVE_TE in its constructors: "
    "upstream refuses to build it without TE",
}
"""``megatron.core`` modules that bind TE class names left as upstream's, and why."""


TE_ALIAS_TARGETS: tuple[tuple[str, str], ...] = (
    # TransformerBlock's final norm: ``LayerNormImpl = TENorm`` under ``if HAVE_TE`` (else torch's norm).
    ("transformer.transformer_block.LayerNormImpl", "TransformerBlockNorm"),
)
"""``(megatron.core submodule.name, te_modules class)``: names that are TE classes under another name."""


TE_MOE_FUSIONS: tuple[str, ...] = (
    "HAVE_TE",  # in moe_utils it only guards the fused functions' branches (tests/test_moe_fusions.py checks)
    "fused_permute",
    "fused_permute_with_probs",
    "fused_unpermute",
    "fused_sort_chunks_by_index",
    "fused_sort_chunks_by_index_with_probs",
    "fused_topk_with_score_function",
    "fused_compute_score_for_moe_aux_loss",
    "fused_moe_aux_loss",
)
"""TE's fused MoE functions ``transformer.moe.moe_utils`` binds to None without TE, served by ``moe_fusions``
(``--moe-permute-fusion``, ``--moe-router-fusion``)."""


def te_installed() -> bool:
    """Whether ``transformer_engine`` can be imported here (found, not imported)."""
    return importlib.util.find_spec("transformer_engine") is not None


def register_te_spec(vendor: str = "cpu") -> None:
    """Register the TE-compatible modules for ``vendor``, unless Transformer Engine is installed."""
    if te_installed():
        return
    for module, names, requires in TE_NAME_TARGETS:
        for name in names:
            # create=True: these names are None (or a MagicMock subclass) on purpose where TE is absent, and
            # replacing upstream's "TE is not installed" None is exactly the point here.
            register(
                target=f"{_MC}.{module}.{name}", impl=f"{_MOD}.{name}", vendor=vendor, create=True, requires=requires
            )
    for target, name in TE_ALIAS_TARGETS:
        register(target=f"{_MC}.{target}", impl=f"{_MOD}.{name}", vendor=vendor)
    for name in TE_MOE_FUSIONS:
        register(
            target=f"{_MC}.transformer.moe.moe_utils.{name}",
            impl=f"fl_patch.impls.cpu.moe_fusions.{name}",
            vendor=vendor,
            create=True,
        )
