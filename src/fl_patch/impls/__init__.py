"""Plugin packs shipped with fl_patch.

Each pack has one registry module whose ``register_pack()`` is the list, top to bottom, of what it
patches: ``register()`` calls with strings only (nothing is imported until a target's module loads),
each with its ``PatchDoc`` (why / how / upstream reference / when to remove), for the pack's own
vendor, so enabling a pack on a machine of another vendor costs a few dict inserts and changes
nothing. A group that depends on the machine (TE absent, Python < 3.12, ...) tests a named condition
(``conditions.py``) where it starts. ``python -m fl_patch.impls.index`` writes the index of every
registration, ``docs/patches.md``; ``fl-patch --list --why`` prints the same fields.

``FL_PATCH_PACKS`` / ``--packs`` picks packs by name from :data:`PACKS` (default: all). The shared
packs of :data:`SHARED_PACKS` are not picked by name: a pack that builds on one registers it for its
own vendor (the CPU pack and the FlagGems pack both include ``te`` and ``without_te``).
"""

from fl_patch.sources import PACKS  # the table of packs users select lives with the other sources

SHARED_PACKS: dict[str, str] = {
    # Transformer Engine's layers in plain torch, for megatron's TE layer spec where TE is absent
    "te": "fl_patch.impls.te.registry:register_pack",
    # megatron-core without TE and Apex: the distributed optimizer's checkpoints with torch's Adam,
    # gradient_accumulation_fusion without Apex's extension
    "without_te": "fl_patch.impls.without_te.registry:register_pack",
}
"""Packs included by other packs, for the including pack's vendor: name -> ``module:function(vendor)``."""

__all__ = ["PACKS", "SHARED_PACKS"]
