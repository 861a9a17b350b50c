"""Imports fine; some of its names are unusable as impls."""

NOT_CALLABLE = 3


class NotASubclass:
    """Stands in for a class it does not subclass."""


def impl(*args, **kwargs):
    return "usable"
