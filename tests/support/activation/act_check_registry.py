"""Registrations for ``--check`` on ``act_target``: one per verdict the checker can give."""

from fl_patch import register

IMPLS = "act_check_impls"
M = "act_target.mod"

register(f"{M}.greet", f"{IMPLS}.greet_ok")
register(f"{M}.greet", f"{IMPLS}.greet_renamed", vendor="renamed")
register(f"{M}.greet", f"{IMPLS}.greet_narrow", vendor="narrow")
register(f"{M}.greet", f"{IMPLS}.greet_other_default", vendor="otherdefault")
register(f"{M}.greet", f"{IMPLS}.greet_forwarding", vendor="forwarding")
register(f"{M}.Greeter.hello", f"{IMPLS}.hello_ok")
register(f"{M}.Greeter.hello", f"{IMPLS}:STATIC_HELLO", vendor="static")
register(f"{M}.Greeter.shout", f"{IMPLS}.shout_ok")
register(f"{M}.Greeter.shout", f"{IMPLS}.shout_with_self", vendor="withself")
register(f"{M}.Greeter.make", f"{IMPLS}.make_ok")
register(f"{M}.Greeter.loud", f"{IMPLS}.loud_ok")
register(f"{M}.Greeter", f"{IMPLS}.GreeterOk")
register(f"{M}.Greeter", f"{IMPLS}.NotAGreeter", vendor="notsub")
register(f"{M}.Greeter", f"{IMPLS}.GreeterNeedsPrefix", vendor="ctor")
register(f"{M}.LIMIT", f"{IMPLS}.LIMIT_OK")
register(f"{M}.LIMIT", f"{IMPLS}.LIMIT_TEXT", vendor="text")
register(f"{M}.gone", f"{IMPLS}.greet_ok")
register("act_target.nosuchmodule.run", f"{IMPLS}.greet_ok")
register(f"{M}.farewell", f"{IMPLS}.no_such_impl")
register(f"{M}.farewell", "act_check_impls_sdk.farewell", vendor="musa")  # vendor not active here: skipped
register(f"{M}.farewell", "act_check_impls_sdk.farewell", vendor="acme")  # active (MG_FL_PREFER): an error
