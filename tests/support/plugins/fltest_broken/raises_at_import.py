"""Fails at import: raises while its body runs."""

raise RuntimeError("vendor library initialisation failed: no device found")
