"""The planted wrong impls (vendor ``default``: chosen on any machine), one per kind of bug compare mode must catch."""

from fl_patch import register

_IMPLS = "compare_wrong.impls"
WRONG = {
    # a norm whose backward drops the weight gradient (the TE-FL RMSNorm bug was a wrong backward)
    "megatron.core.transformer.torch_norm.WrappedTorchNorm": "compare_wrong.norm.WrappedTorchNorm",
    # rotary embedding with the sign of its rotation flipped
    "megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb": f"{_IMPLS}.apply_rotary_pos_emb",
    # SwiGLU with its two halves swapped (silu of the linear half, times the gate half)
    "megatron.core.transformer.mlp.MLP.forward": f"{_IMPLS}.mlp_forward",
    # the masked softmax without its scale (apply_query_key_layer_scaling's layer number)
    "megatron.core.fusions.fused_softmax.FusedScaleMaskSoftmax.forward": f"{_IMPLS}.softmax_forward",
    # the causal mask off by one (each token also sees the next one)
    "megatron.core.transformer.utils.get_default_causal_mask": f"{_IMPLS}.get_default_causal_mask",
    # Adam whose second-moment bias correction lost its square root (the Apex/TE FusedAdam path megatron takes)
    "megatron.core.optimizer.Adam": f"{_IMPLS}.WrongBiasCorrectionAdam",
    "megatron.core.optimizer.USING_PYTORCH_OPTIMIZER": f"{_IMPLS}.USING_PYTORCH_OPTIMIZER",
}

for _target, _impl in WRONG.items():
    register(target=_target, impl=_impl)
