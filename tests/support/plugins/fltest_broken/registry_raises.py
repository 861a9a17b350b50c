"""A registry module that fails before registering anything."""

from fl_patch import register

register("megatron.core.utils.divide", "fltest_broken.usable.impl")
raise ImportError("registry depends on a missing vendor SDK")
