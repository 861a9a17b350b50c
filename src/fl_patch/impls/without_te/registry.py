"""The pack ``without_te``: what it patches, for the vendor of the pack that includes it (``cpu``, ``flaggems``).

Strings only: nothing is imported until a target's module loads. Each group is registered under the
condition that makes it needed (``fl_patch.impls.conditions``); the generated index
(``docs/patches.md``) lists them all, with their conditions.
"""

from __future__ import annotations

from fl_patch import PatchDoc, register
from fl_patch.impls.conditions import APEX_AND_TE_ABSENT, WGRAD_EXTENSION_ABSENT

__all__ = ["DISTRIBUTED_OPTIMIZER_STATE", "WGRAD_ACCUMULATION", "register_pack"]

_HERE = "fl_patch.impls.without_te"
_DISTRIB = "megatron.core.optimizer.distrib_optimizer.DistributedOptimizer"
_LAYERS = "megatron.core.tensor_parallel.layers"
_DISTRIB_FILE = "megatron-core 0.19.2 megatron/core/optimizer/distrib_optimizer.py"
_TORCH_ADAM = (
    "Without Apex/TE the distributed optimizer wraps torch's Adam, which keeps `step` per parameter (TE's and "
    "Apex's FusedAdam keep it in the param groups)"
)

DISTRIBUTED_OPTIMIZER_STATE: dict[str, PatchDoc] = {
    "state_dict": PatchDoc(
        why=f"{_TORCH_ADAM}: state_dict asserts one step among the per-parameter states "
        "(`assert len(steps) == 1`), and loading a checkpoint first calls state_dict() on a fresh optimizer "
        "with no state at all: a distributed-optimizer run cannot resume.",
        how="on an optimizer without state, upstream runs with a step of 0 per parameter for the call (0 steps "
        "taken is the truth), then the state is emptied again; a rank holding no parameter gets the state dict "
        "upstream's TE branch writes (step None); otherwise upstream, untouched.",
        upstream=f"{_DISTRIB_FILE} (DistributedOptimizer.state_dict)",
        remove_when="upstream's state_dict handles an optimizer without state (len(steps) == 0)",
    ),
    "load_state_dict": PatchDoc(
        why=f"{_TORCH_ADAM}: load_state_dict puts one `step` tensor object into every parameter's state; "
        "torch's Adam increments it in place once per parameter, so a resumed run's bias correction is wrong "
        "from its first step (it silently trains differently).",
        how="after upstream has loaded, each parameter sharing the step tensor gets its own copy of the value; a "
        "checkpoint group with step None (written by a rank without parameters) loads with its other groups' step.",
        upstream=f"{_DISTRIB_FILE} (DistributedOptimizer.load_state_dict)",
        remove_when="upstream gives each parameter its own step tensor",
    ),
    "_set_main_param_and_optimizer_states": PatchDoc(
        why=f"{_TORCH_ADAM}: loading copies every state tensor from the checkpoint, `step` included, which "
        "dp_reshardable checkpoints do not store per parameter (the restored step is overwritten with 0) and "
        "fully_reshardable ones do not hold (KeyError 'step'); fp32 main parameters are views of leaves that "
        "require grad, and the copy_ outside no_grad raises.",
        how="upstream under torch.no_grad(), with `step` handed over as a non-tensor that upstream's loop skips "
        "(as its own load_parameter_state_from_fs_model_space skips it).",
        upstream=f"{_DISTRIB_FILE} (DistributedOptimizer._set_main_param_and_optimizer_states)",
        remove_when="upstream skips `step` there and copies under torch.no_grad()",
    ),
}
"""Why each DistributedOptimizer method is patched (impls: ``optimizer_state.py``)."""

WGRAD_ACCUMULATION = PatchDoc(
    why="gradient_accumulation_fusion=True (Megatron-LM's default) needs Apex's CUDA extension "
    "fused_weight_gradient_mlp_cuda; without it layers.py binds _grad_accum_fusion_available = False and "
    "ColumnParallelLinear refuses the config ('... custom CUDA extension fused_weight_gradient_mlp_cuda module "
    "is not found').",
    how="wgrad_accumulation.py stands in for the extension (its two functions and argument order): the weight "
    "gradient added into the fp32 main_grad by one GEMM (torch.addmm with out_dtype=float32 into main_grad on "
    "CUDA, checked once against fp32 arithmetic; main_grad.addmm_ on the CPU); megatron's own code does the rest.",
    upstream="megatron-core 0.19.2 megatron/core/tensor_parallel/layers.py (the fused_weight_gradient_mlp_cuda "
    "import, LinearWithGradAccumulationAndAsyncCommunication.backward); Apex "
    "csrc/megatron/fused_weight_gradient_dense.cpp; Megatron-LM issue #1885 (the error without Apex)",
    remove_when="Apex's extension is installed (nothing here is registered then), or megatron-core accumulates the "
    "weight gradient with torch's out_dtype itself",
)


def register_pack(vendor: str) -> None:
    """Register the fixes for megatron-core without TE and Apex for ``vendor`` (the including pack's own)."""
    # -- The distributed optimizer's checkpoints with torch's Adam: megatron-core builds torch's optimizers
    #    only where neither TE nor Apex is installed.
    if APEX_AND_TE_ABSENT:
        for method, impl in (
            ("state_dict", "distributed_optimizer_state_dict"),
            ("load_state_dict", "distributed_optimizer_load_state_dict"),
            ("_set_main_param_and_optimizer_states", "distributed_optimizer_set_states"),
        ):
            register(
                target=f"{_DISTRIB}.{method}",
                impl=f"{_HERE}.optimizer_state.{impl}",
                vendor=vendor,
                doc=DISTRIBUTED_OPTIMIZER_STATE[method],
            )

    # -- gradient_accumulation_fusion=True without Apex's extension: its flag, and the extension's name, which
    #    layers.py lacks without Apex (create=True installs it).
    if WGRAD_EXTENSION_ABSENT:
        register(
            target=f"{_LAYERS}._grad_accum_fusion_available",
            impl=f"{_HERE}.wgrad_accumulation.AVAILABLE",
            vendor=vendor,
            doc=WGRAD_ACCUMULATION,
        )
        register(
            target=f"{_LAYERS}.fused_weight_gradient_mlp_cuda",
            impl=f"{_HERE}.wgrad_accumulation",
            vendor=vendor,
            create=True,
            doc=WGRAD_ACCUMULATION,
        )
