"""Every patch of the CPU pack (vendor ``cpu``). Only strings: nothing imports until needed."""

from fl_patch import register

CPU = "cpu"

register(
    target="megatron.core.transformer.moe.ops.paged_stash",
    impl="fl_patch.impls.cpu.paged_stash_ops",
    vendor=CPU,
)
