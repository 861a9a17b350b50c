"""Plugin packs shipped with fl_patch.

Each pack is a package whose ``registry`` module only calls ``register()`` (with
strings: nothing is imported until a target's module loads) for its own vendor, so
enabling a pack on a machine of another vendor costs a few dict inserts and
changes nothing. ``FL_PATCH_PACKS`` picks packs by name (default: all).
"""

PACKS: dict[str, str] = {
    "cpu": "fl_patch.impls.cpu.registry",
    "flaggems": "fl_patch.impls.flaggems.registry",
}

__all__ = ["PACKS"]
