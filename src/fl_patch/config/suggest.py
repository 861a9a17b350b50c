"""Near-miss suggestions ("did you mean ...?") for names a user typed: the one module that makes them.

Two questions, two functions: ``closest`` (the one name a typo was surely meant as: one slip for a
short word, two for a long one; used where fl_patch acts on the guess, such as a misspelled
``FL_PATCH_*`` variable or an ``MG_FL_PREFER`` vendor) and ``suggest``/``did_you_mean`` (the few
choices a user may have meant, for a hint in a message: options, ``--only`` keys, registry modules).
``difflib`` is imported only when a hint is asked for (never at start-up).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["closest", "did_you_mean", "edit_distance", "suggest"]


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


def edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal-string-alignment distance (insert, delete, substitute, swap two neighbours), capped at ``limit + 1``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = ca != cb
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], previous2[j - 2] + 1)
        if min(row) > limit:
            return limit + 1
        previous2, previous = previous, row
    return previous[-1]


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``word`` was most likely meant as (one slip for short words, two for long), or None."""
    limit = 1 if len(word) <= 6 else 2
    best: tuple[int, str] | None = None
    for candidate in candidates:
        if candidate == word:
            return None
        distance = 0 if candidate.lower() == word.lower() else edit_distance(word, candidate, limit)
        if distance <= limit and (best is None or distance < best[0]):
            best = (distance, candidate)
    return best[1] if best else None
