"""Every patch of the FlagGems pack (vendor ``flaggems``). Only strings: nothing is imported here.

No torch, triton or flag_gems import happens at registration; each impl module
loads only after its target's megatron module has finished loading, and imports its
kernels on the first call that can use them.
"""

from fl_patch import register

FLAGGEMS = "flaggems"
_PACK = "fl_patch.impls.flaggems"

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
)

for _target, _impl in PATCHES:
    register(target=_target, impl=_impl, vendor=FLAGGEMS)
