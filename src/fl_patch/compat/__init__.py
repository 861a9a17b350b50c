"""FlagScale compatibility: joining a FlagScale tree, and fl_patch's ``megatron.plugin.decorators``."""
