"""A module whose body waits in the middle of its import (a slow import, in one thread)."""

from hostile import sync


def f() -> str:
    return "upstream"


sync.entered.set()
sync.proceed.wait(30)
