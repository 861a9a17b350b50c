"""A registry that imports the module it patches, at its top (not good style, but seen)."""

import fltest_once.target  # noqa: F401
from fl_patch import register

register("fltest_once.target.greet", "fltest_once.impls.greet")
