"""Registered for a module no test imports: importing this is a bug."""

raise AssertionError("fl_patch imported an impl whose target module was never imported")
