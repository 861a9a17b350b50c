"""The import hook: a ``sys.meta_path`` finder and the loaders it hands out.

It knows nothing about registrations or patches: it asks an ``ImportObserver``
(the engine) which names to watch, and tells it when a watched module body has run.
"""

from ._finder import PatchingFinder
from ._loaders import ImportObserver, PatchingLoader, SubstituteLoader

__all__ = ["ImportObserver", "PatchingFinder", "PatchingLoader", "SubstituteLoader"]
