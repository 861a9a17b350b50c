"""Registers identical copies of hot megatron-core functions (FL_PATCH_REGISTRY for bench/overhead.py)."""

from fl_patch import register

TARGETS = {
    "layer_forward": "megatron.core.transformer.transformer_layer.TransformerLayer.forward",
    "attention_forward": "megatron.core.transformer.dot_product_attention.DotProductAttention.forward",
    "mlp_forward": "megatron.core.transformer.mlp.MLP.forward",
    "attention_block_forward": "megatron.core.transformer.attention.Attention.forward",
}

for name, target in TARGETS.items():
    register(target, f"identical_copies.{name}", vendor="cpu")
