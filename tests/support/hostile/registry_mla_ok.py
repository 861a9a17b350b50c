"""A working patch of a megatron-core module that megatron.core itself does not import."""

from fl_patch import register

register(
    "megatron.core.fusions.fused_mla_yarn_rope_apply.fused_apply_mla_rope_for_q",
    "hostile.impls.fused_apply_mla_rope_for_q",
)
