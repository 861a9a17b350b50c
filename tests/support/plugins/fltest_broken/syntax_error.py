"""Fails at import: a syntax error (kept out of ruff by pyproject)."""

def impl(*args, **kwargs)
    return "syntax"
