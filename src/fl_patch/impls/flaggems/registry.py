"""The pack ``flaggems``: megatron-core's hot ops on Triton kernels (vendor ``flaggems``, ``MG_FL_PREFER=flaggems``).

What it patches: the tables below, top to bottom, each row ``(target, impl, PatchDoc)``, and
:func:`register_pack` registers them, a group under its condition (``fl_patch.impls.conditions``),
then the shared packs ``te`` and ``without_te`` for vendor ``flaggems``. Only strings: no torch, triton
or flag_gems import happens at registration; each impl module loads only after its target's megatron
module has finished loading, and imports its kernels on the first call that can use them.
"""

from __future__ import annotations

from fl_patch import PatchDoc, register
from fl_patch.impls.conditions import APEX_AND_TE_ABSENT, TE_ABSENT
from fl_patch.impls.cpu.registry import COMPILE_HELPERS, ROPE_FUSION
from fl_patch.impls.te import registry as te_pack
from fl_patch.impls.without_te import registry as without_te_pack

__all__ = [
    "CREATED",
    "FLAGGEMS",
    "FP8_CREATED",
    "FP8_CREATED_FROM_018",
    "FP8_PATCHES",
    "OPTIMIZER_PATCHES",
    "PATCHES",
    "ROPE_FUSION_CREATED",
    "TE_PATCHES",
    "register_pack",
]

FLAGGEMS = "flaggems"
_PACK = "fl_patch.impls.flaggems"
_TE = "fl_patch.impls.te"
_MC = "megatron-core 0.19.2 megatron/core"
_FALLBACK = "; a call its kernel does not cover runs upstream's original, said once (fl_patch.flaggems logger)"

NORM = PatchDoc(
    why="without Apex or TE the local spec builds its norms with WrappedTorchNorm, plain torch.nn.RMSNorm / "
    "LayerNorm (two or more a layer), whose eager forward+backward moves its bytes at about half the copy "
    "bandwidth of an H200 (docs/gpu_pack.md).",
    how="a WrappedTorchNorm subclass that lets upstream build the module exactly as before, then retypes it to a "
    "subclass of that torch class whose forward is the pack's fused norm kernel (parameters, state_dict keys and "
    "isinstance unchanged)" + _FALLBACK + ".",
    upstream=f"{_MC}/transformer/torch_norm.py (WrappedTorchNorm), models/backends.py (LocalSpecProvider.layer_norm)",
    remove_when="torch's eager RMSNorm/LayerNorm reach the copy bandwidth, or the local spec uses a fused norm "
    "without Apex/TE",
)
SWIGLU = PatchDoc(
    why="upstream's MLP runs SwiGLU as F.silu(x_glu) * x_linear on chunk views (separate kernels, a bf16 "
    "intermediate), and with bias_activation_fusion=True as bias_swiglu_impl under torch.compile (5-20 s of "
    "compile per shape).",
    how="MLP.forward runs fc1, the pack's SwiGLU kernel (fc1's bias added in it), fc2, for a plain SwiGLU MLP (under "
    "fp8 tensorwise, with both linears in fp8, the kernel also takes the amax of fc2's input and fc1's output "
    "gradient for their casts: fp8_swiglu.py); bias_swiglu_impl is the same kernel unless fp8 input storage or CPU "
    "offloading is asked for" + _FALLBACK + ".",
    upstream=f"{_MC}/transformer/mlp.py (MLP.forward), fusions/fused_bias_swiglu.py (bias_swiglu_impl)",
    remove_when="upstream's unfused path fuses SwiGLU itself, or the local spec turns on a fused activation that "
    "needs no compile",
)
ROPE = PatchDoc(
    why="with apply_rope_fusion=False (TE's fused RoPE absent) _apply_rotary_pos_emb_bshd runs about eight "
    "kernels a call, twice a layer; FlagGems 5.0.2's rotary kernel is forward-only and cannot serve training.",
    how="apply_rotary_pos_emb (and the names other modules bound to it) on this project's Triton kernel for the "
    "bshd layout (rotary_interleaved, mscale, MLA's interleaving); cos/sin kept in fp32" + _FALLBACK + ".",
    upstream=f"{_MC}/models/common/embeddings/rope_utils.py (apply_rotary_pos_emb, _apply_rotary_pos_emb_bshd)",
    remove_when="upstream's unfused RoPE is one kernel, or TE's fused RoPE is used",
)
ATTENTION = PatchDoc(
    why="the local spec's core attention repeats K/V for GQA, writes the [b, np, sq, sk] scores, upcasts them to "
    "fp32 for a masked softmax and saves the fp32 probabilities: several GB of traffic a layer each way and the "
    "model's largest activation.",
    how="plain softmax attention (causal, unmasked, or a mask that is exactly causal; no dropout) runs flash "
    "attention on q/k/v where they lie: cuDNN's fused attention through torch SDPA, else the pack's Triton kernel"
    + _FALLBACK
    + ".",
    upstream=f"{_MC}/transformer/dot_product_attention.py (DotProductAttention.forward), "
    "fusions/fused_softmax.py, transformer/utils.py (get_default_causal_mask)",
    remove_when="the local spec ships a fused attention, or TE's attention is used",
)
SOFTMAX = PatchDoc(
    why="where core attention falls back to upstream (a non-causal mask, say), FusedScaleMaskSoftmax without "
    "Apex's extension runs forward_torch_softmax: five passes over [b, np, sq, sk] forward, more backward; "
    "FlagGems' softmax takes no mask.",
    how="one kernel reads each score row once (the causal mask from indices, or a boolean mask by strides, filled "
    "with -10000 after scaling as upstream does); where Apex's kernel would run it still does" + _FALLBACK + ".",
    upstream=f"{_MC}/fusions/fused_softmax.py (FusedScaleMaskSoftmax.forward, forward_torch_softmax)",
    remove_when="the flash path covers every mask megatron passes, or upstream's torch fallback is one fused kernel",
)
CROSS_ENTROPY = PatchDoc(
    why="_VocabParallelCrossEntropy makes an fp32 copy of the [s, b, V] logits and saves the fp32 softmax for "
    "backward (1 GB at seq 2048, batch 4, vocab 32000): about a dozen passes over V-wide rows.",
    how="the pack's kernel computes the per-token loss in one read of the logits (TP > 1: one read per rank and "
    "two all-reduces), backward reads them once more; label smoothing as megatron defines it" + _FALLBACK + ".",
    upstream=f"{_MC}/tensor_parallel/cross_entropy.py (vocab_parallel_cross_entropy), "
    "fusions/fused_cross_entropy.py, models/common/language_module/language_module.py",
    remove_when="upstream's cross entropy stops materializing the fp32 softmax",
)
FUSED_QKV_ROPE = PatchDoc(
    why="TransformerConfig.fused_single_qkv_rope=True hands the unsplit QKV projection to TE's "
    "apply_fused_qkv_rotary_pos_emb; without TE megatron refuses the option ('fused_single_qkv_rope requested but "
    "not available'), and its split path pays a query copy, two RoPE launches and a gradient concatenation.",
    how="apply_fused_qkv_rotary_pos_emb with TE's signature (created where TE is absent) on one Triton launch each "
    "way, and HAVE_FUSED_QKV_ROPE set so megatron takes the path when the config asks for it (nothing changes "
    "otherwise).",
    upstream=f"{_MC}/transformer/attention.py (Attention.forward, split_qkv, HAVE_FUSED_QKV_ROPE)",
    remove_when="TE (with its fused QKV RoPE) is installed and preferred",
)
_OPTIMIZER_WHY = (
    "with neither TE nor Apex megatron-core sets USING_PYTORCH_OPTIMIZER and builds torch's AdamW with its default "
    "foreach kernels (25.7 ms a step for 1.32B parameters on an H200, against 10.7 ms for torch's fused=True), and "
    "its local multi-tensor norm and scale synchronise the host once per tensor"
)
FUSED_ADAM = PatchDoc(
    why=_OPTIMIZER_WHY + ".",
    how="USING_PYTORCH_OPTIMIZER becomes False and optimizer.Adam becomes FusedAdam: a torch.optim.AdamW subclass "
    "taking Apex's adam_w_mode and running torch's fused=True kernel (one launch per group and dtype), accepting "
    "lr=None and completing Adam's step as TE's/Apex's do (without_te.torch_optimizers).",
    upstream=f"{_MC}/optimizer/__init__.py (_get_megatron_optimizer_based_on_param_groups)",
    remove_when="megatron-core's torch fallback asks torch for its fused kernels",
)
MULTI_TENSOR = PatchDoc(
    why=_OPTIMIZER_WHY + ": local_multi_tensor_l2_norm takes one torch.norm per gradient then torch.tensor of the "
    "list, local_multi_tensor_scale an fp32 temporary per tensor (also for the scale-1 main-to-model copy).",
    how="l2 norm: torch._foreach_norm and one norm of the norms on the device, no host synchronisation; scale: "
    "_foreach_copy_ when the scale is 1, _foreach_mul_ in place, else _foreach_mul then _foreach_copy_.",
    upstream=f"{_MC}/utils.py (local_multi_tensor_l2_norm, local_multi_tensor_scale)",
    remove_when="megatron-core's local multi-tensor functions stop synchronising per tensor",
)
TE_NORM = PatchDoc(
    why="the TE-compatible layers (pack te) compute their norms with torch's eager F.rms_norm / F.layer_norm.",
    how="the pack's RMSNorm/LayerNorm kernels behind te.modules.norm (TE's zero-centred gamma), the norm of "
    "TELayerNormColumnParallelLinear and TENorm" + _FALLBACK + ".",
    upstream=f"{_MC}/extensions/transformer_engine.py (TE's LayerNormLinear, the layer the stand-in mirrors)",
    remove_when="TransformerEngine (or TE-FL) is installed: the TE-compatible layers are then not registered",
)
TE_ATTENTION = PatchDoc(
    why="the TE-compatible TEDotProductAttention (pack te) runs torch SDPA with whatever backend torch picks.",
    how="causal or unmasked calls without dropout whose k and v have q's head size on the pack's flash attention "
    "(cuDNN, or the Triton kernel); padding masks, dropout and MLA's different v head size stay on SDPA, said once.",
    upstream=f"{_MC}/extensions/transformer_engine.py (TE's DotProductAttention)",
    remove_when="TransformerEngine (or TE-FL) is installed: the TE-compatible layers are then not registered",
)
TE_GROUPED = PatchDoc(
    why="the TE-compatible grouped linears (pack te, --moe-grouped-gemm) run one GEMM per expert.",
    how="one grouped GEMM (torch._grouped_mm) per linear, trusted only after a one-time check per dtype and device "
    "against the per-expert loop, forward and backward; otherwise the loop runs, said once.",
    upstream=f"{_MC}/extensions/transformer_engine.py (TE's GroupedLinear), transformer/moe/experts.py (TEGroupedMLP)",
    remove_when="TransformerEngine (or TE-FL) is installed: the TE-compatible layers are then not registered",
)
WEIGHTED_SWIGLU = PatchDoc(
    why="TEGroupedMLP with bias_activation_fusion calls weighted_bias_swiglu_impl, a torch.compile-d function.",
    how="silu(a) * g on the pack's SwiGLU kernel, then the routing weight, as upstream's weighted_swiglu computes "
    "it" + _FALLBACK + ".",
    upstream=f"{_MC}/fusions/fused_bias_swiglu.py (weighted_bias_swiglu_impl), transformer/moe/experts.py",
    remove_when="TransformerEngine (or TE-FL) is installed, or upstream's weighted SwiGLU needs no compile",
)
MOE_PERMUTE = PatchDoc(
    why="without TE the fused MoE permutation (pack te, --moe-permute-fusion) moves tokens through chains of "
    "small torch ops (about fifteen launches each) and an index_add with atomics; a MoE step on one GPU is "
    "host-bound.",
    how="the four row-movement functions of te.moe_fusions on the pack's Triton kernels (kernels/moe_permute.py): "
    "the row map in 4 launches, rows and probabilities in one scatter, the unpermute sum in fp32 in a fixed order "
    "without atomics, the chunk regrouping in one launch each way" + _FALLBACK + ".",
    upstream=f"{_MC}/transformer/moe/moe_utils.py (permute, unpermute, sort_chunks_by_idxs with fused=True)",
    remove_when="TransformerEngine is installed: the fused MoE functions are then not registered",
)
_FP8_REMOVE = "TransformerEngine (or TE-FL) is installed: none of fp8.py is registered then"
FP8_CONTEXT = PatchDoc(
    why="megatron enters fp8 only through TE: get_fp8_context calls TE's fp8_autocast with a TE recipe object "
    "(get_fp8_recipe); without TE it returns nullcontext() and --fp8-format trains nothing in fp8.",
    how="the same decisions as megatron's TE branch with fp8.py's Autocast and Recipe (tensorwise, delayed, "
    "blockwise); at model build every fp8 option is served or refused by name (TEFeatureError).",
    upstream=f"{_MC}/fp8_utils.py (get_fp8_context, get_fp8_recipe)",
    remove_when=_FP8_REMOVE,
)
FP8_LAYER = PatchDoc(
    why="the TE-compatible linears (pack te) refuse fp8 without TE (te.modules.fp8_layer raises TEFeatureError).",
    how="each linear gets a LinearFp8 that runs its forward, dgrad and wgrad GEMMs in fp8 through torch._scaled_mm "
    "while an Autocast is active (e4m3 inputs and weights, e5m2/e4m3 gradients, fp32 accumulation), its fp8 "
    "state in TE's _extra_state layout; under gradient_accumulation_fusion the wgrad GEMM adds into main_grad "
    "itself (cuBLASLt with beta = 1 through ctypes, checked once per device: cublaslt.py).",
    upstream=f"{_MC}/extensions/transformer_engine.py; Transformer Engine 2.x module/base.py (get_extra_state)",
    remove_when=_FP8_REMOVE,
)
FP8_NORM = PatchDoc(
    why="under fp8 tensorwise scaling each linear casts its input in two passes (amax, then cast); the QKV "
    "projection's and fc1's inputs are TELayerNormColumnParallelLinear's norm output, which the norm kernel holds in "
    "registers as it writes it.",
    how="te.modules.linear_input_norm (the norm that linear calls) runs the pack's RMSNorm/LayerNorm kernel's amax "
    "variant, at the plain kernel's tuned pick, and offers the amax to the linear, whose cast then skips its amax "
    "pass (the same bytes); any other call goes to te.modules.norm as installed (fp8_norm.py).",
    upstream=f"{_MC}/extensions/transformer_engine.py (TE's LayerNormLinear, which casts inside its norm kernel)",
    remove_when=_FP8_REMOVE,
)
FP8_EXPERTS = PatchDoc(
    why="under fp8, moe/experts.py asserts HAVE_TE and pads each expert's rows with TE's Fp8Padding/Fp8Unpadding "
    "(None without TE); its HAVE_TE guards nothing else that runs without TE (tests/impls/test_flaggems_fp8.py "
    "re-reads the source).",
    how="HAVE_TE = True in experts.py alone, and Fp8Padding/Fp8Unpadding padding each expert's rows to a multiple "
    "of 16 (created where absent).",
    upstream=f"{_MC}/transformer/moe/experts.py",
    remove_when=_FP8_REMOVE,
)
FP8_CONFIG_GATES = PatchDoc(
    why="TransformerConfig refuses MoE fp8 below TE 1.7 and grouped fp8 below TE 1.11, and the TE version without TE "
    "is 0.0.0.",
    how="is_te_min_version in transformer_config answers True for those two gates (the pack serves MoE fp8, grouped "
    "experts included) and megatron's own answer for every other version.",
    upstream=f"{_MC}/transformer/transformer_config.py (is_te_min_version)",
    remove_when=_FP8_REMOVE,
)
FP8_CHECKPOINT = PatchDoc(
    why="under fp8 megatron recomputes through TE's te_checkpoint (full recompute, the MLP, the MoE layer and its "
    "shared experts); without TE that name is None or raises.",
    how="megatron's own activation checkpoint, re-entering the fp8 recipe active when the forward ran around the "
    "recomputed call (delayed scaling with recompute is refused at build).",
    upstream=f"{_MC}/extensions/transformer_engine.py (te_checkpoint), recompute.py, transformer/moe/moe_layer.py",
    remove_when=_FP8_REMOVE,
)

# -- The local spec's hot ops (target in megatron-core 0.19.2, impl, doc).
PATCHES: tuple[tuple[str, str, PatchDoc], ...] = (
    # RMSNorm / LayerNorm of the local spec (torch.nn.RMSNorm / LayerNorm built by WrappedTorchNorm)
    ("megatron.core.transformer.torch_norm.WrappedTorchNorm", f"{_PACK}.norm.WrappedTorchNorm", NORM),
    # SwiGLU: the local spec's unfused MLP path, and the bias_activation_fusion path
    ("megatron.core.transformer.mlp.MLP.forward", f"{_PACK}.mlp.mlp_forward", SWIGLU),
    ("megatron.core.fusions.fused_bias_swiglu.bias_swiglu_impl", f"{_PACK}.mlp.bias_swiglu_impl", SWIGLU),
    # Rotary embedding (unfused bshd path)
    (
        "megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb",
        f"{_PACK}.rope.apply_rotary_pos_emb",
        ROPE,
    ),
    # Core attention (flash), and the masked softmax for what the flash path does not take
    (
        "megatron.core.transformer.dot_product_attention.DotProductAttention.forward",
        f"{_PACK}.attention.dot_product_attention_forward",
        ATTENTION,
    ),
    (
        "megatron.core.fusions.fused_softmax.FusedScaleMaskSoftmax.forward",
        f"{_PACK}.softmax.scale_mask_softmax_forward",
        SOFTMAX,
    ),
    # Vocabulary cross entropy
    (
        "megatron.core.tensor_parallel.cross_entropy.vocab_parallel_cross_entropy",
        f"{_PACK}.cross_entropy.vocab_parallel_cross_entropy",
        CROSS_ENTROPY,
    ),
    (
        "megatron.core.fusions.fused_cross_entropy.fused_vocab_parallel_cross_entropy",
        f"{_PACK}.cross_entropy.fused_vocab_parallel_cross_entropy",
        CROSS_ENTROPY,
    ),
    # megatron's fused_single_qkv_rope path: the flag attention.py reads to take it (only a config that asks for the
    # path does; nothing changes otherwise)
    ("megatron.core.transformer.attention.HAVE_FUSED_QKV_ROPE", f"{_PACK}.rope.HAVE_FUSED_QKV_ROPE", FUSED_QKV_ROPE),
)
# -- Names the pack adds to a megatron module where they are absent (TE's function, without TE).
CREATED: tuple[tuple[str, str, PatchDoc], ...] = (
    (
        "megatron.core.transformer.attention.apply_fused_qkv_rotary_pos_emb",
        f"{_PACK}.rope.apply_fused_qkv_rotary_pos_emb",
        FUSED_QKV_ROPE,
    ),
)
# -- The optimizer step megatron-core builds without Apex/TE: torch's fused Adam behind Apex's FusedAdam constructor,
#    and multi-tensor norm/scale/copy without per-tensor syncs. (The distributed optimizer's checkpoints with torch's
#    Adam: the shared pack without_te.)
OPTIMIZER_PATCHES: tuple[tuple[str, str, PatchDoc], ...] = (
    ("megatron.core.optimizer.USING_PYTORCH_OPTIMIZER", f"{_PACK}.optimizer.USING_PYTORCH_OPTIMIZER", FUSED_ADAM),
    ("megatron.core.optimizer.Adam", f"{_PACK}.optimizer.FusedAdam", FUSED_ADAM),
    ("megatron.core.utils.local_multi_tensor_l2_norm", f"{_PACK}.optimizer.local_multi_tensor_l2_norm", MULTI_TENSOR),
    ("megatron.core.utils.local_multi_tensor_scale", f"{_PACK}.optimizer.local_multi_tensor_scale", MULTI_TENSOR),
)
# -- The TE-compatible layers (pack te) on the pack's kernels: their maths functions, MoE's weighted SwiGLU, the MoE
#    token permutation's row movement.
TE_PATCHES: tuple[tuple[str, str, PatchDoc], ...] = (
    (f"{_TE}.modules.norm", f"{_PACK}.te.norm", TE_NORM),
    (f"{_TE}.modules.attention", f"{_PACK}.te.attention", TE_ATTENTION),
    (f"{_TE}.modules.grouped_matmul", f"{_PACK}.te.grouped_matmul", TE_GROUPED),
    (
        "megatron.core.fusions.fused_bias_swiglu.weighted_bias_swiglu_impl",
        f"{_PACK}.te.weighted_bias_swiglu_impl",
        WEIGHTED_SWIGLU,
    ),
    (f"{_TE}.moe_fusions.make_row_id_map", f"{_PACK}.moe.make_row_id_map", MOE_PERMUTE),
    (f"{_TE}.moe_fusions.permute_rows", f"{_PACK}.moe.permute_rows", MOE_PERMUTE),
    (f"{_TE}.moe_fusions.unpermute_rows", f"{_PACK}.moe.unpermute_rows", MOE_PERMUTE),
    (f"{_TE}.moe_fusions.sort_chunks", f"{_PACK}.moe.sort_chunks", MOE_PERMUTE),
)
# -- fp8 training without TE (fp8.py): megatron's fp8 context and recipe, the TE-compatible linears' fp8 GEMMs, the
#    MoE experts' fp8 token padding, TE's checkpoint for recompute under fp8.
FP8_PATCHES: tuple[tuple[str, str, PatchDoc], ...] = (
    ("megatron.core.fp8_utils.get_fp8_context", f"{_PACK}.fp8.get_fp8_context", FP8_CONTEXT),
    ("megatron.core.fp8_utils.get_fp8_recipe", f"{_PACK}.fp8.get_fp8_recipe", FP8_CONTEXT),
    (f"{_TE}.modules.fp8_layer", f"{_PACK}.fp8.fp8_layer", FP8_LAYER),
    (f"{_TE}.modules.linear_input_norm", f"{_PACK}.fp8_norm.linear_input_norm", FP8_NORM),
    ("megatron.core.transformer.moe.experts.HAVE_TE", f"{_PACK}.fp8.HAVE_TE", FP8_EXPERTS),
    (
        "megatron.core.transformer.transformer_config.is_te_min_version",
        f"{_PACK}.fp8.config_te_min_version",
        FP8_CONFIG_GATES,
    ),
)
# (None without TE: replaced on purpose, create=True)
FP8_CREATED: tuple[tuple[str, str, PatchDoc], ...] = (
    ("megatron.core.transformer.moe.experts.Fp8Padding", f"{_PACK}.fp8.Fp8Padding", FP8_EXPERTS),
    ("megatron.core.transformer.moe.experts.Fp8Unpadding", f"{_PACK}.fp8.Fp8Unpadding", FP8_EXPERTS),
    ("megatron.core.extensions.transformer_engine.te_checkpoint", f"{_PACK}.fp8.te_checkpoint", FP8_CHECKPOINT),
    ("megatron.core.transformer.moe.moe_layer.te_checkpoint", f"{_PACK}.fp8.te_checkpoint", FP8_CHECKPOINT),
)
# megatron.core.recompute (its import of te_checkpoint) is new in 0.18
FP8_CREATED_FROM_018: tuple[tuple[str, str, PatchDoc], ...] = (
    ("megatron.core.recompute.te_checkpoint", f"{_PACK}.fp8.te_checkpoint", FP8_CHECKPOINT),
)


_ROPE_UTILS = "megatron.core.models.common.embeddings.rope_utils"
ROPE_FUSION_CREATED = [
    # apply_rope_fusion=True (Megatron-LM's default) without TE: TE's fused RoPE functions. bshd on the pack's
    # kernel; packed thd sequences on the CPU pack's plain-torch version (the same function on any device).
    (f"{_ROPE_UTILS}.fused_apply_rotary_pos_emb", f"{_PACK}.rope.fused_apply_rotary_pos_emb", ROPE_FUSION),
    (
        f"{_ROPE_UTILS}.fused_apply_rotary_pos_emb_thd",
        "fl_patch.impls.cpu.rope.fused_apply_rotary_pos_emb_thd",
        ROPE_FUSION,
    ),
]


def register_pack() -> None:
    """The ``flaggems`` pack (``fl_patch.impls.PACKS``): every registration, for vendor ``flaggems``."""
    # -- The local spec's hot ops, and the names the pack creates.
    for target, impl, doc in PATCHES:
        register(target=target, impl=impl, vendor=FLAGGEMS, doc=doc)
    for target, impl, doc in CREATED:
        register(target=target, impl=impl, vendor=FLAGGEMS, create=True, doc=doc)

    # -- The optimizer step: only where neither TE nor Apex is installed (with them megatron uses their fused kernels).
    if APEX_AND_TE_ABSENT:
        for target, impl, doc in OPTIMIZER_PATCHES:
            register(target=target, impl=impl, vendor=FLAGGEMS, doc=doc)

    # -- The TE layer spec on the pack's kernels, and fp8 without TE: only where TE is absent (with TE, megatron's own
    #    TE path runs).
    if TE_ABSENT:
        for target, impl, doc in (*TE_PATCHES, *FP8_PATCHES):
            register(target=target, impl=impl, vendor=FLAGGEMS, doc=doc)
        for target, impl, doc in FP8_CREATED:
            register(target=target, impl=impl, vendor=FLAGGEMS, create=True, doc=doc)
        for target, impl, doc in ROPE_FUSION_CREATED:
            register(target=target, impl=impl, vendor=FLAGGEMS, create=True, doc=doc)
        for target, impl, doc in FP8_CREATED_FROM_018:
            register(target=target, impl=impl, vendor=FLAGGEMS, create=True, doc=doc, requires="megatron-core>=0.18")

    # -- Shared packs, for vendor flaggems: te (TE's layers in plain torch, under TE_ABSENT inside; their maths on
    #    the kernels above) and without_te (the distributed optimizer's checkpoints with torch's Adam,
    #    gradient_accumulation_fusion without Apex's extension: one cuBLAS call here).
    te_pack.register_pack(vendor=FLAGGEMS)
    without_te_pack.register_pack(vendor=FLAGGEMS)

    # -- The megatron-core wheel on a GPU machine: compile_helpers runs `make` where the wheel ships no Makefile and
    #    sys.exit(1)s (pretrain_gpt.py's rank 0 calls it at start-up). The CPU pack's impl, for this vendor too.
    register(
        target="megatron.core.datasets.utils.compile_helpers",
        impl="fl_patch.impls.cpu.without_extensions.compile_helpers",
        vendor=FLAGGEMS,
        doc=COMPILE_HELPERS,
    )
