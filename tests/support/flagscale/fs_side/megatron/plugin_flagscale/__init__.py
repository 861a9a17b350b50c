"""A FlagScale-side plugin tree laid out like FlagScale's ``flagscale/train/megatron/plugin_flagscale``:
its ``override_registry.py`` registers megatron.training targets through ``megatron.plugin.decorators``."""
