"""Two registrations, one with its PatchDoc: what ``--list``, ``--check`` and ``--report`` must show first."""

from fl_patch import PatchDoc, register

register(
    target="megatron.core.utils.divide",
    impl="fltest_two.impls.divide",
    doc=PatchDoc(
        why="upstream's divide asserts, which says nothing about the numbers",
        how="raises ValueError naming both numbers",
        upstream="megatron/core/utils.py, divide (megatron-core 0.19.2)",
        remove_when="upstream's message names the numbers",
    ),
)
register(
    target="megatron.core.optimizer.clip_grads.get_grad_norm_fp32",
    impl="fltest_two.impls.get_grad_norm_fp32",
)
