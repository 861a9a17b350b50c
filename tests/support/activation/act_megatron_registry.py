"""A registry on real megatron-core for the torchrun test (used with FL_PATCH_PACKS=none)."""

from fl_patch import register

# The one CPU-pack stand-in that megatron.core needs to import at all without triton.
register("megatron.core.transformer.moe.ops.paged_stash", "fl_patch.impls.cpu.paged_stash_ops")
register("megatron.core.utils.divide", "act_megatron_impls.divide")
