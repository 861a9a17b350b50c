# As in FlagScale's tree: importing any megatron.plugin module runs the registry first.
import megatron.plugin.override_registry  # noqa: F401
