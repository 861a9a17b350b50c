"""Fails at import: needs a package that is not installed."""

import fltest_no_such_dependency  # noqa: F401


def impl(*args, **kwargs):
    return "import_error"
