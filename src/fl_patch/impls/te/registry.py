"""The pack ``te``: Transformer Engine's layers in plain torch, for megatron-core's TE layer spec where TE is absent.

Shared by the packs that run the TE spec without TE: the CPU pack (vendor ``cpu``) and the FlagGems GPU
pack (vendor ``flaggems``) each call :func:`register_pack` for their own vendor. Only under ``TE_ABSENT``
(``fl_patch.impls.conditions``): with TE installed nothing here is registered and megatron uses TE itself. Not in ``FL_PATCH_PACKS``:
it comes with the pack that includes it. Strings only; no import of torch or megatron.

What it patches, top to bottom in :func:`register_pack`:

1. The TE class names megatron-core's modules bind at module level (``if HAVE_TE: from
   ...extensions.transformer_engine import TELinear ... else: TELinear = None``, or upstream's
   ``MagicMock`` stand-ins where the import is unconditional): each becomes the TE-compatible class of
   ``modules.py`` (TE's constructor, forward contract and parameter names, built on megatron's own
   tensor-parallel layers), so megatron's own spec functions, its ``TESpecProvider`` users and its
   ``isinstance``/``in [TELinear]`` checks run unchanged. :data:`TE_NAME_TARGETS` lists them per module
   and release (``tests/impls/test_te.py`` re-derives the list from each release's source);
   :data:`TE_NAMES_LEFT` says why the others are left.
2. ``TransformerBlock``'s final norm (``LayerNormImpl = TENorm`` under ``HAVE_TE``).
3. TE's fused MoE functions ``moe_utils`` binds to None (``--moe-permute-fusion``, ``--moe-router-fusion``),
   served by ``moe_fusions.py``.

``megatron.core.extensions.transformer_engine`` itself is left alone: it loads while
``megatron.core.tensor_parallel`` is still initialising, before the classes can be built on
``ColumnParallelLinear``; code that imports a TE class from it directly gets upstream's stand-in.

A pack with kernels puts them behind the layers' maths by registering its own impls for
``fl_patch.impls.te.modules.norm`` / ``attention`` / ``grouped_matmul`` / ``fp8_layer`` and
``fl_patch.impls.te.moe_fusions.make_row_id_map`` / ``permute_rows`` / ``unpermute_rows`` /
``sort_chunks`` (the FlagGems pack does: ``flaggems/registry.py``); these functions are the pack's
extension points, its modules stay as they are.
"""

from __future__ import annotations

import importlib.util

from fl_patch import PatchDoc, register
from fl_patch.impls.conditions import TE_ABSENT

__all__ = [
    "TE_ALIAS_TARGETS",
    "TE_CLASS_NAMES",
    "TE_MOE_FUSIONS",
    "TE_NAMES_LEFT",
    "TE_NAME_TARGETS",
    "register_pack",
    "te_installed",
]

_MOD = "fl_patch.impls.te.modules"
_FUSIONS = "fl_patch.impls.te.moe_fusions"
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
follows it: fl_patch rebinds aliases). ``tests/impls/test_te.py`` re-reads each release's source (the installed
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
    "HAVE_TE",  # in moe_utils it only guards the fused functions' branches (tests/impls/test_te_moe_fusions.py checks)
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


# --------------------------------------------------------------------------- why each patch exists
_REMOVE = (
    "Transformer Engine (or TransformerEngine-FL) is installed where this runs (nothing here is registered "
    "then), or megatron-core builds its TE layer spec without TE"
)
_TE_FILE = "megatron-core 0.19.2 megatron/core/extensions/transformer_engine.py"
_SPEC_ISSUE = "Megatron-LM issue #1049 (the TE spec fails without TE)"


def _te_class(name: str, what: str, how: str) -> PatchDoc:
    return PatchDoc(
        why=f"Without TE, megatron-core binds {name} to None (or to upstream's MagicMock stand-in where the "
        f"import is unconditional), so {what} cannot be built.",
        how=how,
        upstream=f"{_TE_FILE} ({name}), bound by the module the target names; {_SPEC_ISSUE}",
        remove_when=_REMOVE,
    )


TE_CLASS_DOCS: dict[str, PatchDoc] = {
    "TESpecProvider": PatchDoc(
        why="Without TE, gpt_layer_specs binds TESpecProvider = None (gpt_layer_specs.py line 54) and "
        "get_gpt_layer_with_transformer_engine_spec() calls it: TypeError 'NoneType' object is not callable, for "
        "the spec TransformerConfig's default transformer_impl and pretrain_gpt.py ask for; the provider class "
        "itself (transformer_engine_spec_provider, imported unconditionally) hands out upstream's MagicMock "
        "stand-ins of TE's wrappers.",
        how="megatron's BackendSpecProvider returning the TE-compatible classes (modules.TESpecProvider), so "
        "upstream's spec functions build TE's module tree and parameter names in plain torch.",
        upstream="megatron-core 0.19.2 megatron/core/extensions/transformer_engine_spec_provider.py, "
        f"megatron/core/models/gpt/gpt_layer_specs.py; {_SPEC_ISSUE}",
        remove_when=_REMOVE,
    ),
    "TENorm": _te_class(
        "TENorm",
        "the norms modules take by this name (the GPT decoder and MTP blocks' layer norms in gpt_layer_specs, "
        "attention's default q/k norm, the hybrid and heterogeneous specs)",
        "TE's LayerNorm/RMSNorm in torch (weight, bias, zero-centred gamma) through modules.norm, subclassing "
        "upstream's TENorm so that a class replaces a class.",
    ),
    "TELinear": _te_class(
        "TELinear",
        "what tests for it by name: multi-latent attention's down projections (`in [TELinear]` chooses "
        "parallel_mode='duplicated'), attention's isinstance(linear_proj, TELinear)",
        "a replicated linear with TE's constructor and parameter names on megatron's tensor-parallel helpers, "
        "its gradients reduced as TE's are.",
    ),
    "TEColumnParallelLinear": _te_class(
        "TEColumnParallelLinear",
        "the TE spec's column-parallel projections (MLA's up projections, hybrid and T5 specs)",
        "megatron's ColumnParallelLinear with TE's constructor (gather_output=True refused as TE does) and "
        "_extra_state.",
    ),
    "TERowParallelLinear": _te_class(
        "TERowParallelLinear",
        "the TE spec's output projections (linear_proj, linear_fc2)",
        "megatron's RowParallelLinear with TE's constructor (input_is_parallel=False refused as TE does) and "
        "_extra_state.",
    ),
    "TELayerNormColumnParallelLinear": _te_class(
        "TELayerNormColumnParallelLinear",
        "the TE spec's fused norm + QKV / fc1 projections",
        "the norm (layer_norm_weight, layer_norm_bias) on the local sequence shard through modules.norm, then "
        "megatron's ColumnParallelLinear: TE's parameter names, so TE-spec checkpoints load.",
    ),
    "TEDotProductAttention": _te_class(
        "TEDotProductAttention",
        "the TE spec's core attention",
        "torch's scaled_dot_product_attention through modules.attention (GQA, causal and padding masks, MLA's "
        "separate v head size, dropout on megatron's RNG tracker); TE-only features raise TEFeatureError by name.",
    ),
}
"""Why each TE class name is replaced (one PatchDoc a name, shared by every module that binds it)."""

BLOCK_NORM = PatchDoc(
    why="TransformerBlock's final norm is LayerNormImpl = TENorm under HAVE_TE, else Apex's or torch's norm: "
    "without TE a TE-spec model's final norm has the local spec's class and parameter names.",
    how="TransformerBlockNorm: the TE-compatible norm taking the torch norm's positional arguments, as with TE.",
    upstream="megatron-core 0.19.2 megatron/core/transformer/transformer_block.py (LayerNormImpl)",
    remove_when=_REMOVE,
)
MOE_HAVE_TE = PatchDoc(
    why="moe_utils refuses the fused paths 'if not HAVE_TE or fused_x is None'; its HAVE_TE guards nothing "
    "else (tests/impls/test_te_moe_fusions.py re-reads the source to keep that true).",
    how="HAVE_TE = True in transformer.moe.moe_utils alone, beside the fused functions below.",
    upstream="megatron-core 0.19.2 megatron/core/transformer/moe/moe_utils.py",
    remove_when=_REMOVE,
)
MOE_PERMUTE = PatchDoc(
    why="--moe-permute-fusion takes TE's fused permutation, which moe_utils binds to None without TE: "
    "TransformerConfig refuses it ('fused permutation is not available. Please install TE >= 2.1.0').",
    how="TE's signatures and semantics in torch (moe_fusions.py): a row map built on the device without host "
    "synchronisation, rows laid out as megatron's unfused permute lays them out, unpermute summed in fp32; the "
    "row movement goes through four functions a pack with kernels replaces (the FlagGems pack's Triton kernels).",
    upstream="megatron-core 0.19.2 megatron/core/transformer/moe/moe_utils.py (permute, unpermute, "
    "sort_chunks_by_idxs), megatron/core/transformer/transformer_config.py (the moe_permute_fusion check)",
    remove_when=_REMOVE,
)
MOE_ROUTER = PatchDoc(
    why="--moe-router-fusion takes TE's fused router functions, None without TE: 'fused_topk_with_score_function "
    "is not available' at the first routing.",
    how="megatron's own unfused maths (fused=False): the same probabilities, routing map and aux loss as without "
    "the flag, on every vendor.",
    upstream="megatron-core 0.19.2 megatron/core/transformer/moe/moe_utils.py (topk_routing_with_score_function, "
    "compute_routing_scores_for_aux_loss, switch_load_balancing_loss_func)",
    remove_when=_REMOVE,
)
_ROUTER_FUSIONS = ("fused_topk_with_score_function", "fused_compute_score_for_moe_aux_loss", "fused_moe_aux_loss")
_ALIAS_DOCS = {"TransformerBlockNorm": BLOCK_NORM}


def _fusion_doc(name: str) -> PatchDoc:
    if name == "HAVE_TE":
        return MOE_HAVE_TE
    return MOE_ROUTER if name in _ROUTER_FUSIONS else MOE_PERMUTE


# --------------------------------------------------------------------------- what it patches
def register_pack(vendor: str) -> None:
    """Register the TE-compatible layers for ``vendor`` (the including pack's own), where TE is absent."""
    if not TE_ABSENT:  # with Transformer Engine installed megatron uses TE itself: nothing of this pack applies
        return

    # -- 1. The TE class names megatron-core's modules bind: the TE-compatible classes. create=True: these names
    #       are None (or a MagicMock subclass) on purpose where TE is absent; replacing that None is the point.
    for module, names, requires in TE_NAME_TARGETS:
        for name in names:
            register(
                target=f"{_MC}.{module}.{name}",
                impl=f"{_MOD}.{name}",
                vendor=vendor,
                create=True,
                requires=requires,
                doc=TE_CLASS_DOCS[name],
            )

    # -- 2. TE classes under another name: TransformerBlock's LayerNormImpl.
    for target, name in TE_ALIAS_TARGETS:
        register(target=f"{_MC}.{target}", impl=f"{_MOD}.{name}", vendor=vendor, doc=_ALIAS_DOCS[name])

    # -- 3. TE's fused MoE functions moe_utils binds to None (--moe-permute-fusion, --moe-router-fusion), and the
    #       HAVE_TE that guards only them there.
    for name in TE_MOE_FUSIONS:
        register(
            target=f"{_MC}.transformer.moe.moe_utils.{name}",
            impl=f"{_FUSIONS}.{name}",
            vendor=vendor,
            create=True,
            doc=_fusion_doc(name),
        )
