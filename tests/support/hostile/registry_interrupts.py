"""Registers act_target.mod.greet with an impl whose import raises KeyboardInterrupt."""

from fl_patch import register

register("act_target.mod.greet", "hostile.interrupts_at_import.patched")
