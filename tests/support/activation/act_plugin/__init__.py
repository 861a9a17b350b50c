"""A vendor plugin for ``act_target``: a registry of strings and the impls."""
