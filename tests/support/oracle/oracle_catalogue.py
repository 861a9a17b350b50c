"""The oracle's catalogue: which megatron objects get an identical copy, and how a copy is named.

The oracle (issue 43) registers, for every function, method (plain, static, class), property and
class *defined* in megatron-core and megatron.training, an impl that is an identical copy of the
upstream object. Whatever differs with it in place (a test outcome, a loss bit) is a defect of the
engine. This module is plain data and pure functions, shared by the scanner that writes the
catalogue (``oracle_scan.py``), the registry that registers a selection of it
(``oracle_registry.py``), the impls (``oracle_impls.py``), ``bench/oracle.py`` and
``tests/scenarios/test_oracle.py``. It imports nothing of fl_patch or megatron.

An entry is one target: ``{"target", "family", "form", "module", "skip"}``. ``family`` is what
``--kinds`` selects (functions, methods, properties, classes); ``form`` says what the copy is
(a plain function, a static or class method, an ``lru_cache``, a property, a cached_property, a
class). ``skip`` is empty, or why no copy can be made (an Enum with members cannot be subclassed,
...): skipped entries are never registered and are listed with their reason.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "CATALOGUE",
    "FAMILIES",
    "FORMS",
    "decode",
    "encode",
    "impl_name",
    "load",
    "pack",
    "parse_impl_name",
    "select",
    "unpack",
]

CATALOGUE = Path(__file__).resolve().with_name("oracle_targets.json")
"""The catalogue scanned on this machine's megatron-core (``oracle_scan.py`` writes it)."""

# form -> (family, the one-letter tag in an impl's name)
FORMS: dict[str, tuple[str, str]] = {
    "function": ("functions", "f"),
    "lru_cache": ("functions", "l"),
    "method": ("methods", "m"),
    "staticmethod": ("methods", "s"),
    "classmethod": ("methods", "c"),
    "lru_cache_method": ("methods", "L"),
    "property": ("properties", "p"),
    "cached_property": ("properties", "q"),
    "class": ("classes", "k"),
}
FAMILIES = ("functions", "methods", "properties", "classes")
_BY_TAG = {tag: form for form, (_, tag) in FORMS.items()}


def encode(target: str) -> str:
    """A Python identifier that spells ``target`` reversibly: ``_`` is ``_0``, ``.`` is ``_1``."""
    return target.replace("_", "_0").replace(".", "_1")


def decode(name: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "_":
            nxt = name[i + 1 : i + 2]
            if nxt not in ("0", "1"):
                raise ValueError(f"{name!r}: not an encoded target ('_' must be followed by 0 or 1)")
            out.append("_" if nxt == "0" else ".")
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def impl_name(target: str, form: str) -> str:
    """The attribute of ``oracle_impls`` that builds the copy of ``target`` (its form's tag, then the target)."""
    return f"{FORMS[form][1]}_{encode(target)}"


def parse_impl_name(name: str) -> tuple[str, str]:
    """(form, target) of an ``oracle_impls`` attribute name; ``ValueError`` if it is not one."""
    tag, sep, rest = name.partition("_")
    if not sep or tag not in _BY_TAG or not rest:
        raise ValueError(f"{name!r}: not an oracle impl name")
    return _BY_TAG[tag], decode(rest)


def pack(entries: Sequence[dict[str, str]]) -> dict[str, list[list[str]]]:
    """Entries as stored: ``{module: [[name inside it, form, skip], ...]}`` (a third of the size)."""
    stored: dict[str, list[list[str]]] = {}
    for e in entries:
        rest = e["target"][len(e["module"]) + 1 :]
        stored.setdefault(e["module"], []).append([rest, e["form"], *([e["skip"]] if e.get("skip") else [])])
    return stored


def unpack(stored: dict[str, list[list[str]]]) -> list[dict[str, str]]:
    return [
        {
            "target": f"{module}.{row[0]}",
            "family": FORMS[row[1]][0],
            "form": row[1],
            "module": module,
            "skip": row[2] if len(row) > 2 else "",
        }
        for module, rows in stored.items()
        for row in rows
    ]


def load(path: Path | str = CATALOGUE) -> dict[str, object]:
    """The catalogue (or a selection written from it), its ``entries`` unpacked to a list of dicts."""
    data: dict[str, object] = json.loads(Path(path).read_text(encoding="utf-8"))
    data["entries"] = unpack(data["entries"])  # type: ignore[arg-type]
    return data


def _split(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item.strip()]


def select(
    entries: Sequence[dict[str, str]],
    *,
    kinds: str | Iterable[str] | None = None,
    modules: str | Iterable[str] | None = None,
    exclude: str | Iterable[str] | None = None,
    sample: int = 0,
    seed: int = 0,
    per_family: bool = False,
) -> list[dict[str, str]]:
    """The entries to register: not skipped, of the ``kinds`` (families) and ``modules`` (prefixes) named,
    minus ``exclude`` (targets, or prefixes ending in ``.``), then ``sample`` of them at random (seeded;
    ``per_family``: ``sample`` of each family). Keeps the catalogue's order."""
    families = _split(kinds) or list(FAMILIES)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown kinds {unknown} (known: {', '.join(FAMILIES)})")
    prefixes = tuple(_split(modules))
    left_out = _split(exclude)
    exact = {x for x in left_out if not x.endswith(".")}
    under = tuple(x for x in left_out if x.endswith("."))

    def wanted(entry: dict[str, str]) -> bool:
        target = entry["target"]
        return (
            not entry.get("skip")
            and entry["family"] in families
            and (not prefixes or entry["module"].startswith(prefixes))
            and target not in exact
            and not target.startswith(under)
        )

    chosen = [e for e in entries if wanted(e)]
    if sample <= 0:
        return chosen
    rng = random.Random(seed)
    if per_family:
        keep: set[int] = set()
        for family in families:
            indices = [i for i, e in enumerate(chosen) if e["family"] == family]
            keep.update(rng.sample(indices, min(sample, len(indices))))
    else:
        keep = set(rng.sample(range(len(chosen)), min(sample, len(chosen))))
    return [e for i, e in enumerate(chosen) if i in keep]
