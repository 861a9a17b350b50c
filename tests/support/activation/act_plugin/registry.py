"""Registered through ``--registry act_plugin.registry`` or ``FL_PATCH_REGISTRY``."""

from fl_patch import register

register("act_target.mod.greet", "act_plugin.impls.greet")
register("act_target.mod.Greeter.hello", "act_plugin.impls.hello")
register("act_target.unused.never", "act_plugin.impls.never")
