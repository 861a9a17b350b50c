"""A small plugin used by the engine tests: impls for real megatron-core targets."""
