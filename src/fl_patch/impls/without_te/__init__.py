"""The pack ``without_te``: fixes for megatron-core where Transformer Engine and Apex are absent, shared by packs.

Not CPU problems and not GPU ones: megatron-core without TE and Apex (always so on a CPU, and on a
GPU machine that has neither) builds torch's optimizers and has no fused weight-gradient extension,
and some of its code gets that case wrong. The CPU pack (vendor ``cpu``) and the FlagGems GPU pack
(vendor ``flaggems``) each call :func:`registry.register_pack` for their own vendor; it is not in
``FL_PATCH_PACKS`` (it comes with the pack that includes it).

- ``registry.py``: what it patches, each group under its condition (``fl_patch.impls.conditions``).
- ``optimizer_state.py``: the distributed optimizer's checkpoints with torch's Adam.
- ``wgrad_accumulation.py``: Apex's ``fused_weight_gradient_mlp_cuda`` (``gradient_accumulation_fusion=True``).
- ``torch_optimizers.py``: torch's Adam/AdamW/SGD accepting ``lr=None`` as TE's/Apex's do (used by the
  CPU pack's view of ``megatron.core.optimizer``'s torch and its ``SGD``, and by the FlagGems pack's
  ``FusedAdam``).
"""
