"""A plugin author's first plugin: two registrations on real megatron-core targets (tests/test_cli_plugin_first.py)."""
