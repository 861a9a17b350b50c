"""Remembers, across re-imports of ctrlc_registry, that Ctrl-C was already pressed once."""

interrupted = False
