"""Near-miss suggestions ("did you mean ...?") for names a user typed.

One helper for every place that names a choice back to the user: the CLI's options,
vendors and ``--disable`` keys, and start-up warnings about ``FL_PATCH_*`` variables.
``difflib`` is imported only when a suggestion is asked for (never at start-up).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["did_you_mean", "suggest"]


def suggest(word: str, choices: Iterable[str], *, n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The choices closest to ``word`` (best first), compared without case; none if nothing is close."""
    import difflib

    by_folded: dict[str, str] = {}
    for choice in choices:
        by_folded.setdefault(choice.lower(), choice)
    folded = word.lower()
    if folded in by_folded:
        return [by_folded[folded]]
    close = difflib.get_close_matches(folded, list(by_folded), n=n, cutoff=cutoff)
    # A prefix typed in full ("--rep" for "--report") is as good a hint as a typo.
    prefixed = [c for c in by_folded if len(folded) >= 3 and c.startswith(folded) and c not in close]
    return [by_folded[c] for c in (close + sorted(prefixed))[:n]]


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 3, cutoff: float = 0.6) -> str:
    """``" (did you mean X?)"``, ``" (did you mean X or Y?)"``, or ``""``: to append to a message."""
    found = suggest(word, choices, n=n, cutoff=cutoff)
    if not found:
        return ""
    return " (did you mean " + " or ".join(found) + "?)"
