"""What every surface (``--list``, ``--check``, ``--report``, the merged job report) shares: plugin first.

A plugin author reads these surfaces for their own registrations; fl_patch's shipped packs hold
hundreds more. So each surface shows the user's registrations first and in full, problems
first, and each shipped pack as one line of counts by status, unless asked for (``--all``,
``--only pack=NAME``). Who owns a registration is read from its source: a module of the
``fl_patch`` package is a shipped pack (which one: the registry module it came from,
``fl_patch.impls.<pack>.registry``), anything else (a registry module, an entry point, a
FlagScale tree) is the user's.

Width: the terminal's (``COLUMNS``, then ``shutil.get_terminal_size``; 100 where neither says);
a long cause is wrapped under its row, never cut.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterable, Mapping

from fl_patch.core.registration import shipped

__all__ = [
    "NOT_IN_A_PACK",
    "counts_text",
    "matches",
    "owner",
    "owner_of",
    "pack_lines",
    "pack_order",
    "terminal_width",
    "wrap",
]

NOT_IN_A_PACK = "none"
"""``--only pack=none``: the registrations of no shipped pack (the user's)."""

_RANK_CHECK = "rank check"  # fl_patch's own registration (job/registry.py): a pack of one, shown as such


def owner(source: str) -> str | None:
    """The shipped pack a registration comes from, by the registry module that made it; None for the user's.

    Each pack registers from its own ``fl_patch.impls.<pack>.registry`` (the shared packs ``te`` and
    ``without_te`` too, registered by ``cpu`` and ``flaggems`` for their vendors), which is the
    registration's ``source``: the same name ``docs/patches.md`` files it under.
    """
    if not shipped(source):
        return None  # a registry module, an entry point, a FlagScale tree: the user's
    parts = source.split(".")
    if parts[1:2] == ["job"]:
        return _RANK_CHECK
    if parts[1:2] == ["impls"] and len(parts) > 2:
        return parts[2]
    return "fl_patch"


def owner_of(source: str) -> str:
    """``owner`` as the ``pack`` field shows it: the pack's name, or ``none`` for the user's."""
    return owner(source) or NOT_IN_A_PACK


def matches(key: str, wanted: str, value: str | None) -> bool:
    """Whether ``--only key=wanted`` keeps a row whose ``key`` is ``value``: whole values, ``*`` globs, no case;
    ``target`` also matches a part of the dotted path (``--only target=clip_grads``)."""
    import fnmatch

    value = (value or "").lower()
    wanted = wanted.lower()
    if any(c in wanted for c in "*?["):
        return fnmatch.fnmatchcase(value, wanted)
    return wanted in value if key == "target" else value == wanted


def pack_order(name: str) -> tuple[int, str]:
    """Packs in a stable order, fl_patch's own rank check last."""
    return (name == _RANK_CHECK, name)


def pack_lines(statuses: Mapping[str, Iterable[str]], width: int, tail: str = "") -> list[str]:
    """One line per shipped pack, in pack order: its name, its statuses counted (``counts_text``), then ``tail``."""
    name_width = max((len(name) for name in statuses), default=0)
    lines: list[str] = []
    for name in sorted(statuses, key=pack_order):
        head = f"  {name:<{name_width}}  "
        lines += wrap(counts_text(statuses[name]) + tail, width, head, " " * (len(head) + 2))
    return lines


def terminal_width(fallback: int = 100) -> int:
    """The width to fit: ``COLUMNS``, else the terminal's, else ``fallback``; never under 40."""
    return max(40, shutil.get_terminal_size((fallback, 24)).columns)


def counts_text(statuses: Iterable[str]) -> str:
    """``160 waiting, 3 other vendor chosen``: how many of each, most first."""
    counted = Counter(statuses)
    return ", ".join(f"{n} {status}" for status, n in sorted(counted.items(), key=lambda item: (-item[1], item[0])))


def _pieces(word: str, room: int) -> list[str]:
    """A word longer than ``room`` cut after dots, slashes or underscores where it can be, else where it must."""
    out = []
    while len(word) > room:
        cut = max(word.rfind(c, 0, room) for c in "./_,") + 1
        if cut <= 0:
            cut = room
        out.append(word[:cut])
        word = word[cut:]
    return [*out, word] if word else out


def wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width``, starting with ``first`` then ``rest`` (default: as wide as ``first``).

    Nothing is dropped: a word too long for a line (a dotted path) is split at its dots.
    """
    rest = " " * len(first) if rest is None else rest
    lines: list[str] = []
    line = first
    blank = True  # nothing but the indent on the line yet
    room = max(10, width - max(len(first), len(rest)))  # a piece fits after either indent
    for word in text.split():
        for index, piece in enumerate(_pieces(word, room)):
            joiner = "" if blank or index else " "  # the pieces of one word join without a space
            if not blank and len(line) + len(joiner) + len(piece) > width:
                lines.append(line)
                line, blank, joiner = rest, True, ""
            line += joiner + piece
            blank = False
    if not blank or not lines:
        lines.append(line)
    return [item.rstrip() for item in lines]
