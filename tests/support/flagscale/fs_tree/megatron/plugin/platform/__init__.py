"""The tree's platform registry, as FlagScale's: registering prints to stdout at import."""

from megatron.plugin.platform.platform_manager import get_platform, register_platforms

__all__ = ["get_platform", "register_platforms"]

register_platforms()
