"""What replaces what. Strings only: nothing here imports megatron or the impls.

Each impl is imported when its target's module has finished loading, and only for the
vendor chosen on the machine; ``vendor="default"`` runs wherever no vendor-specific
registration for that target is chosen.
"""

from fl_patch import register

# 1. Wrap: call the original, add something around it.
register(
    target="megatron.core.optimizer.clip_grads.get_grad_norm_fp32",
    impl="my_plugin.clip_grads.get_grad_norm_fp32",
)

# 2. Replace: a function of its own, same signature.
register(target="megatron.core.utils.divide", impl="my_plugin.utils.divide")

# 3. A factory class: WrappedTorchNorm.__new__ returns a torch norm module, not an instance.
register(
    target="megatron.core.transformer.torch_norm.WrappedTorchNorm",
    impl="my_plugin.norm.WrappedTorchNorm",
)

# 4. A method whose signature upstream copies with @copy_signature.
register(
    target="megatron.core.transformer.transformer_layer.TransformerLayer.forward",
    impl="my_plugin.layer.forward",
)
