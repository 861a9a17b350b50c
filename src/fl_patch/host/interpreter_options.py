"""Python's own command line: which words are interpreter options, and which of them cut fl_patch off.

One parser for both uses: the launcher keeps the options its interpreter was started
with (``python -u -X importtime -m fl_patch train.py`` runs ``python -u -X importtime
train.py``), and the child watch reads a child's command line for ``-I``, ``-E`` and
``-S``, which keep a new interpreter from reading ``PYTHONPATH`` or running ``site``.

The rules are CPython's: options come before the program (a script, ``-c code``,
``-m module`` or ``-``); single-letter flags combine (``-IS``); ``-X`` and ``-W`` take
a value, attached or as the next word; ``-c`` and ``-m`` end the options, even when
combined (``-Im fl_patch`` is ``-I`` then ``-m``); ``--check-hash-based-pycs`` is the
one long option with a value.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ISOLATION_FLAGS", "parse_options"]

ISOLATION_FLAGS = frozenset("IES")  # -I isolated, -E no PYTHON* variables, -S no site
_LONG_WITH_VALUE = frozenset({"--check-hash-based-pycs"})


def parse_options(words: Sequence[str]) -> tuple[list[str], set[str]]:
    """(the option words before the program, the single-letter flags among them).

    ``words`` is a command line without the interpreter itself (``sys.orig_argv[1:]``).
    A combined word that ends in ``-c``/``-m`` keeps its flags: ``-OIm`` gives ``-OI``.
    """
    options: list[str] = []
    flags: set[str] = set()
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("--", "-") or not word.startswith("-"):
            break  # the program (a script, or the console script's path)
        if word.startswith("--"):
            takes_value = word in _LONG_WITH_VALUE
            options += list(words[i : i + 2]) if takes_value else [word]
            i += 2 if takes_value else 1
            continue
        for j in range(1, len(word)):
            letter = word[j]
            if letter in "cm":
                if j > 1:
                    options.append(word[:j])
                return options, flags
            if letter in "XW":
                options.append(word)
                if j == len(word) - 1 and i + 1 < len(words):
                    options.append(words[i + 1])  # its value is the next word
                    i += 1
                break
            flags.add(letter)
        else:
            options.append(word)
        i += 1
    return options, flags
