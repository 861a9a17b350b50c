"""The module that is also known as hostile.alias_pkg.experimental."""


def get_device() -> str:
    return "upstream"
