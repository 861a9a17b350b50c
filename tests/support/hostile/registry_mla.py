"""A megatron-core target whose module upstream imports inside ``try: ... except:`` (multi_latent_attention.py)."""

from fl_patch import register

register(
    "megatron.core.fusions.fused_mla_yarn_rope_apply.fused_apply_mla_rope_for_q",
    "fltest_broken.import_error.impl",
)
