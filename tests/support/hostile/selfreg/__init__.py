"""A module that loads a plugin registry while its own body runs (plugins discovered at import)."""
