"""Serves two targets; importing it (for the first) imports the second target's module."""

from fltest_pending.pkg.second import C as _UpstreamC


def f():
    return "patched"


class C2(_UpstreamC):
    pass
