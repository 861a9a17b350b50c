"""Appends to a list each time this body runs: a second load would show."""

import fltest_once

fltest_once.EXECUTIONS.append(__name__)


def greet() -> str:
    return "upstream"
