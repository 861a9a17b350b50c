"""Every patch of the FlagGems pack (vendor ``flaggems``). Only strings: nothing is imported here.

No torch, triton or flag_gems import happens at registration; each impl module
loads only after its target's megatron module has finished loading, and imports its
kernels on the first call that can use them.
"""

import importlib.util

from fl_patch import register
from fl_patch.impls.cpu.te_registry import register_te_spec, te_installed

FLAGGEMS = "flaggems"
_PACK = "fl_patch.impls.flaggems"
_CPU_OPTIMIZER = "fl_patch.impls.cpu.optimizer"

# (target in megatron-core 0.19.2, impl)
PATCHES: tuple[tuple[str, str], ...] = (
    # RMSNorm / LayerNorm of the local spec (torch.nn.RMSNorm / LayerNorm built by WrappedTorchNorm)
    ("megatron.core.transformer.torch_norm.WrappedTorchNorm", f"{_PACK}.norm.WrappedTorchNorm"),
    # SwiGLU: the local spec's unfused MLP path, and the bias_activation_fusion path
    ("megatron.core.transformer.mlp.MLP.forward", f"{_PACK}.mlp.mlp_forward"),
    ("megatron.core.fusions.fused_bias_swiglu.bias_swiglu_impl", f"{_PACK}.mlp.bias_swiglu_impl"),
    # Rotary embedding (unfused bshd path)
    (
        "megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb",
        f"{_PACK}.rope.apply_rotary_pos_emb",
    ),
    # Core attention (flash), and the masked softmax for what the flash path does not take
    (
        "megatron.core.transformer.dot_product_attention.DotProductAttention.forward",
        f"{_PACK}.attention.dot_product_attention_forward",
    ),
    (
        "megatron.core.fusions.fused_softmax.FusedScaleMaskSoftmax.forward",
        f"{_PACK}.softmax.scale_mask_softmax_forward",
    ),
    # Vocabulary cross entropy (TP=1)
    (
        "megatron.core.tensor_parallel.cross_entropy.vocab_parallel_cross_entropy",
        f"{_PACK}.cross_entropy.vocab_parallel_cross_entropy",
    ),
    (
        "megatron.core.fusions.fused_cross_entropy.fused_vocab_parallel_cross_entropy",
        f"{_PACK}.cross_entropy.fused_vocab_parallel_cross_entropy",
    ),
    # megatron's fused_single_qkv_rope path: the flag attention.py reads to take it (only a
    # config that asks for the path does; nothing changes otherwise)
    ("megatron.core.transformer.attention.HAVE_FUSED_QKV_ROPE", f"{_PACK}.rope.HAVE_FUSED_QKV_ROPE"),
)
# The optimizer step megatron-core builds without Apex/TE (optimizer.py): torch's fused Adam
# behind Apex's FusedAdam constructor, and multi-tensor norm/scale/copy without per-tensor syncs.
# Only where neither is installed: with them megatron already uses their fused kernels.
OPTIMIZER_PATCHES: tuple[tuple[str, str], ...] = (
    ("megatron.core.optimizer.USING_PYTORCH_OPTIMIZER", f"{_PACK}.optimizer.USING_PYTORCH_OPTIMIZER"),
    ("megatron.core.optimizer.Adam", f"{_PACK}.optimizer.FusedAdam"),
    ("megatron.core.utils.local_multi_tensor_l2_norm", f"{_PACK}.optimizer.local_multi_tensor_l2_norm"),
    ("megatron.core.utils.local_multi_tensor_scale", f"{_PACK}.optimizer.local_multi_tensor_scale"),
    # A torch Adam keeps `step` per parameter (TE's/Apex's keep it in the param groups), which megatron's
    # distributed optimizer reads only on its torch branch: a fresh optimizer's state_dict asserts one step
    # among none (every checkpoint load builds one), a load shares one step tensor among all parameters, and
    # the per-parameter copy overwrites the restored step (dp_reshardable) or stops with KeyError 'step'
    # (fully_reshardable). The CPU pack's fixes (fl_patch/impls/cpu/optimizer.py), which are device-independent.
    *(
        (f"megatron.core.optimizer.distrib_optimizer.DistributedOptimizer.{method}", f"{_CPU_OPTIMIZER}.{impl}")
        for method, impl in (
            ("state_dict", "distributed_optimizer_state_dict"),
            ("load_state_dict", "distributed_optimizer_load_state_dict"),
            ("_set_main_param_and_optimizer_states", "distributed_optimizer_set_states"),
        )
    ),
)
HAVE_APEX_OR_TE = any(importlib.util.find_spec(name) is not None for name in ("transformer_engine", "apex"))
if not HAVE_APEX_OR_TE:
    PATCHES = PATCHES + OPTIMIZER_PATCHES
# Names the pack adds to a megatron module where they are absent (TE's function, without TE).
CREATED: tuple[tuple[str, str], ...] = (
    (
        "megatron.core.transformer.attention.apply_fused_qkv_rotary_pos_emb",
        f"{_PACK}.rope.apply_fused_qkv_rotary_pos_emb",
    ),
)

# gradient_accumulation_fusion=True without Apex (Megatron-LM's default): the weight gradient added into
# the fp32 main_grad by one cuBLAS call, as Apex's extension does (fl_patch/impls/cpu/wgrad_accumulation.py).
WGRAD_ACCUMULATION = "fl_patch.impls.cpu.wgrad_accumulation"
if importlib.util.find_spec("fused_weight_gradient_mlp_cuda") is None:
    PATCHES = (
        *PATCHES,
        ("megatron.core.tensor_parallel.layers._grad_accum_fusion_available", f"{WGRAD_ACCUMULATION}.AVAILABLE"),
    )
    CREATED = (*CREATED, ("megatron.core.tensor_parallel.layers.fused_weight_gradient_mlp_cuda", WGRAD_ACCUMULATION))
# Transformer Engine's layer spec without TE (te.py): fl_patch's TE-compatible modules
# (fl_patch/impls/cpu/te_modules.py) for this vendor too, their maths on the pack's kernels,
# and MoE's weighted SwiGLU. Only where TE is absent: with TE, megatron uses TE itself.
TE_PATCHES: tuple[tuple[str, str], ...] = (
    ("fl_patch.impls.cpu.te_modules.norm", f"{_PACK}.te.norm"),
    ("fl_patch.impls.cpu.te_modules.attention", f"{_PACK}.te.attention"),
    ("fl_patch.impls.cpu.te_modules.grouped_matmul", f"{_PACK}.te.grouped_matmul"),
    ("megatron.core.fusions.fused_bias_swiglu.weighted_bias_swiglu_impl", f"{_PACK}.te.weighted_bias_swiglu_impl"),
    # --moe-permute-fusion: TE's fused permutation (fl_patch/impls/cpu/moe_fusions.py) moving rows on the kernels
    ("fl_patch.impls.cpu.moe_fusions.make_row_id_map", f"{_PACK}.moe.make_row_id_map"),
    ("fl_patch.impls.cpu.moe_fusions.permute_rows", f"{_PACK}.moe.permute_rows"),
    ("fl_patch.impls.cpu.moe_fusions.unpermute_rows", f"{_PACK}.moe.unpermute_rows"),
    ("fl_patch.impls.cpu.moe_fusions.sort_chunks", f"{_PACK}.moe.sort_chunks"),
)
# fp8 training without TE (fp8.py): megatron's fp8 context and recipe (TE's fp8_autocast and recipe classes),
# the TE-compatible linears' fp8 GEMMs, and the MoE experts' fp8 token padding (TE's Fp8Padding). Only where TE is
# absent: with TE, megatron's own TE path runs.
FP8_PATCHES: tuple[tuple[str, str], ...] = (
    ("megatron.core.fp8_utils.get_fp8_context", f"{_PACK}.fp8.get_fp8_context"),
    ("megatron.core.fp8_utils.get_fp8_recipe", f"{_PACK}.fp8.get_fp8_recipe"),
    ("fl_patch.impls.cpu.te_modules.fp8_layer", f"{_PACK}.fp8.fp8_layer"),
    # experts.py asserts HAVE_TE under fp8 and pads with TE's Fp8Padding; its HAVE_TE guards nothing else that runs
    # without TE (the op-fuser check imports TE and returns False): tests/test_flaggems_fp8.py re-reads the source
    ("megatron.core.transformer.moe.experts.HAVE_TE", f"{_PACK}.fp8.HAVE_TE"),
    # TransformerConfig refuses MoE fp8 below TE 1.7 / grouped fp8 below TE 1.11 (0.0.0 without TE): those two gates
    ("megatron.core.transformer.transformer_config.is_te_min_version", f"{_PACK}.fp8.config_te_min_version"),
)
FP8_CREATED: tuple[tuple[str, str], ...] = (
    ("megatron.core.transformer.moe.experts.Fp8Padding", f"{_PACK}.fp8.Fp8Padding"),
    ("megatron.core.transformer.moe.experts.Fp8Unpadding", f"{_PACK}.fp8.Fp8Unpadding"),
    # activation recompute under fp8 goes through TE's checkpoint: raises without TE (extensions), None where bound
    ("megatron.core.extensions.transformer_engine.te_checkpoint", f"{_PACK}.fp8.te_checkpoint"),
    ("megatron.core.recompute.te_checkpoint", f"{_PACK}.fp8.te_checkpoint"),
    ("megatron.core.transformer.moe.moe_layer.te_checkpoint", f"{_PACK}.fp8.te_checkpoint"),
)
TE_SPEC = not te_installed()

for _target, _impl in PATCHES:
    register(target=_target, impl=_impl, vendor=FLAGGEMS)
if TE_SPEC:
    register_te_spec(vendor=FLAGGEMS)
    for _target, _impl in TE_PATCHES:
        register(target=_target, impl=_impl, vendor=FLAGGEMS)
    for _target, _impl in FP8_PATCHES:
        register(target=_target, impl=_impl, vendor=FLAGGEMS)
    for _target, _impl in FP8_CREATED:  # None without TE: replaced on purpose
        register(target=_target, impl=_impl, vendor=FLAGGEMS, create=True)
for _target, _impl in CREATED:
    register(target=_target, impl=_impl, vendor=FLAGGEMS, create=True)
