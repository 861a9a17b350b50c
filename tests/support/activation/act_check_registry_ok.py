"""Only registrations that fit: ``--check`` exits 0."""

from fl_patch import register

register("act_target.mod.greet", "act_check_impls.greet_ok")
register("act_target.mod.Greeter.make", "act_check_impls.make_ok")
register("act_target.mod.Greeter", "act_check_impls.GreeterOk")
