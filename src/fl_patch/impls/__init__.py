"""Plugin packs shipped with fl_patch.

Each pack is a registry module that only calls ``register()`` (with strings: nothing is
imported until a target's module loads) for its own vendor, so enabling a pack on a
machine of another vendor costs a few dict inserts and changes nothing; or a function
of such a module (``module:function``), called to register. ``FL_PATCH_PACKS`` picks
packs by name (default: all).
"""

from fl_patch.sources import PACKS  # the table of shipped packs lives with the other sources

__all__ = ["PACKS"]
