"""A plain target module for the hook tests."""


def f() -> str:
    return "upstream"
