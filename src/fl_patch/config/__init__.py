"""Settings, options and the vocabulary every layer above reads (imports nothing of fl_patch)."""
