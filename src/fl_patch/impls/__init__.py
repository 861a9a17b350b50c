"""Plugin packs shipped with fl_patch.

Each pack is a registry module that only calls ``register()`` (with strings: nothing is
imported until a target's module loads) for its own vendor, so enabling a pack on a
machine of another vendor costs a few dict inserts and changes nothing; or a function
of such a module (``module:function``), called to register. ``FL_PATCH_PACKS`` picks
packs by name (default: all).
"""

PACKS: dict[str, str] = {
    "cpu": "fl_patch.impls.cpu.registry",
    # The CPU pack's process-wide CUDA-on-CPU transfer (vendor cpu too), a pack of its own so that
    # FL_PATCH_PACKS=cpu keeps the megatron patches alone; FL_PATCH_CUDA_ON_CPU=0 also turns it off.
    "cuda_on_cpu": "fl_patch.impls.cpu.cuda_on_cpu_registry:register_pack",
    "flaggems": "fl_patch.impls.flaggems.registry",
}

__all__ = ["PACKS"]
