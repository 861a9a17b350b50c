"""What the compare says at exit: the table (worst first) and the JSON records, one line per process.

Every applied patch of the vendor chosen here has a record: the targets compared, and the others
with the reason they were not. The text table lists the compared targets and those not compared for
a reason of their own; targets that compute nothing themselves (module attributes, whole modules,
names a registration created) are counted in one line and listed in the JSON only.

A record (``results.TargetResult.as_record`` plus the engine's vendor and impl, and the rank)::

    {"target", "vendor", "impl", "kind", "calls", "calls_seen", "verdict": "match"|"differs"|"not compared",
     "status": "pass"|"warning"|"error"|null, "max_abs", "max_rel", "cosine", "leaves", "worst",
     "shapes", "reason", "rank", "source", "pack"}

``pack``: the shipped pack the registration comes from, ``none`` for the user's (``reporting.layout.owner_of``).

The file gets one line per process, ``{"pid", "rank", "world_size", "program", "compare_calls", "records"}``:
under torchrun each rank appends its own (one ``write`` each, so lines never interleave), and
``results.merge`` merges the records of all lines by target.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from fl_patch.compare.results import DIFFERS, MATCH, NEVER_CALLED, NOT_COMPARED, RESULTS
from fl_patch.reporting.layout import (
    NOT_IN_A_PACK,
    counts_text,
    matches,
    owner_of,
    pack_lines,
    pack_order,
    terminal_width,
    wrap,
)

__all__ = ["format_table", "process_entry", "records", "write_json"]

_NOTHING_CALLED = ("attribute", "module", "property", "classmethod")


def records(engine_records: list[Any] | None = None) -> list[dict[str, object]]:
    """One record per applied target of the chosen vendor (and per target the wrappers saw)."""
    if engine_records is None:
        from fl_patch.runtime import RUNTIME

        engine_records = RUNTIME.engine.records(detect=False)
    rank = os.environ.get("RANK")
    out: dict[str, dict[str, object]] = {}
    for record in engine_records:
        if record.status.value != "applied" or record.vendor != record.chosen_vendor:
            continue
        result = RESULTS.by_target.get(record.target)
        entry = result.as_record() if result is not None else _unwrapped(record)
        entry.update(vendor=record.vendor, impl=record.impl, rank=rank, source=record.source)
        entry["pack"] = owner_of(record.source)
        entry.setdefault("kind", record.kind)
        out[record.target] = entry
    for target, result in list(RESULTS.by_target.items()):
        if target not in out:
            out[target] = {**result.as_record(), "vendor": None, "impl": None, "rank": rank, "pack": None}
    return sorted(out.values(), key=_worst_first)


def _unwrapped(record: Any) -> dict[str, object]:
    kind = record.kind or "attribute"
    if kind in _NOTHING_CALLED:
        reason = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} target: nothing is called through it"
    elif "created" in (record.detail or "") or "upstream had None" in (record.detail or ""):
        reason = "upstream has nothing here to compare with"
    else:
        reason = "not wrapped (applied before compare mode was on, or not a function, method or class)"
    return {
        "target": record.target,
        "kind": kind,
        "calls": 0,
        "calls_seen": 0,
        "verdict": NOT_COMPARED,
        "status": None,
        "max_abs": None,
        "max_rel": None,
        "cosine": None,
        "leaves": 0,
        "worst": None,
        "shapes": [],
        "reason": reason,
    }


def _worst_first(record: dict[str, object]) -> tuple[int, float, str]:
    order = {DIFFERS: 0, MATCH: 1, NOT_COMPARED: 2}[str(record["verdict"])]
    rel = record.get("max_rel")
    return order, -float(rel) if isinstance(rel, int | float) else 0.0, str(record["target"])


def _label() -> str:
    label = f"pid {os.getpid()}"
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None:
        label += f", rank {rank}" + (f" of {world}" if world else "")
    argv = getattr(sys, "argv", None) or ["?"]
    return f"{label}, {os.path.basename(str(argv[0])) or argv[0]}"


def _number(value: object, fmt: str = ".3g") -> str:
    return "-" if not isinstance(value, int | float) else format(value, fmt)


def _quiet(entry: dict[str, object]) -> str | None:
    """Why a row is left out of the text table (counted in one line; the JSON has it), or None to show it."""
    if entry["verdict"] != NOT_COMPARED:
        return None
    if entry.get("kind") in _NOTHING_CALLED:
        return "compute nothing themselves (module attributes, whole modules)"
    if entry.get("reason") == NEVER_CALLED:
        return "never called"
    return None


def _pack(entry: dict[str, object]) -> str:
    pack = entry.get("pack")
    return pack if isinstance(pack, str) else NOT_IN_A_PACK  # (a target only the wrappers saw: shown as yours)


def _field(entry: dict[str, object], key: str) -> str:
    """``--only``'s fields on a compare row: ``status`` is the verdict."""
    if key == "pack":
        return _pack(entry)
    return str(entry.get("verdict" if key == "status" else key) or "")


def format_table(
    entries: list[dict[str, object]],
    calls: int,
    label: str | None = None,
    *,
    width: int | None = None,
    show_all: bool = False,
    only: Sequence[tuple[str, str]] = (),
) -> str:
    """The text table, plugin first: a summary line; the user's rows, every one, worst first, with impl and reason
    under each; the shipped packs' rows that differ; a line of counts per pack (``show_all``: their rows too, as
    the user's); ``only``: just the rows that match (``--only``, as the exit report), whoever registered them."""
    width = width or terminal_width()
    count = {v: sum(e["verdict"] == v for e in entries) for v in (DIFFERS, MATCH, NOT_COMPARED)}
    head = (
        f"fl_patch compare ({label or _label()}): the first {calls} call(s) of each patch against upstream: "
        f"{count[DIFFERS]} differ, {count[MATCH]} match, {count[NOT_COMPARED]} not compared"
    )
    lines = wrap(head, width, "", "  ")
    if only:
        kept = [e for e in entries if all(matches(k, v, _field(e, k)) for k, v in only)]
        shown_only = ", ".join(f"{key}={value}" for key, value in only)
        lines += wrap(f"rows matching --only {shown_only}: {len(kept)}", width)
        return "\n".join(lines + _rows(kept, width))
    yours = [e for e in entries if _pack(e) == NOT_IN_A_PACK]
    packs: dict[str, list[dict[str, object]]] = {}
    for e in entries:
        if _pack(e) != NOT_IN_A_PACK:
            packs.setdefault(_pack(e), []).append(e)
    if yours:
        lines += wrap(f"yours: {counts_text(str(e['verdict']) for e in yours)}", width)
        lines += _rows(yours, width)  # every one, never-called too: the plugin's author asks about each
    quiet: dict[str, int] = {}
    if show_all:
        for name in sorted(packs, key=pack_order):
            rows = packs[name]
            lines += wrap(f"pack {name}: {counts_text(str(e['verdict']) for e in rows)}", width)
            lines += _rows([e for e in rows if _quiet(e) is None], width)
            for e in rows:
                why = _quiet(e)
                if why is not None:
                    quiet[why] = quiet.get(why, 0) + 1
    elif packs:
        differing = [e for rows in packs.values() for e in rows if e["verdict"] == DIFFERS]
        if differing:
            lines += wrap("shipped packs' rows that differ:", width)
            lines += _rows(differing, width)
        lines += wrap("shipped packs, one line each (--compare --all lists their rows, --only pack=NAME one's):", width)
        lines += pack_lines({name: (str(e["verdict"]) for e in rows) for name, rows in packs.items()}, width)
    if quiet:
        counted = "; ".join(f"{n} {why}" for why, n in quiet.items())
        lines += wrap(f"not compared, not listed: {counted} (the JSON lists them)", width, "", "  ")
    return "\n".join(lines)


def _rows(entries: list[dict[str, object]], width: int) -> list[str]:
    """One block per target (worst first), as the exit report's: the target; its verdict and numbers; the impl,
    the shapes compared on, the worst case and the reason under it."""
    lines: list[str] = []
    for e in sorted(entries, key=_worst_first):
        lines += wrap(str(e["target"]), width)
        verdict = str(e["verdict"])
        if e.get("calls") or verdict != NOT_COMPARED:
            verdict += (
                f": {e.get('calls') or 0} call(s), max abs {_number(e.get('max_abs'))}, max rel "
                f"{_number(e.get('max_rel'))}, cosine {_number(e.get('cosine'), '.6f')}"
            )
        lines += wrap(verdict, width, "  ", "    ")
        under = [f"-> {e.get('impl') or '?'}" + (f" (vendor {e['vendor']})" if e.get("vendor") else "")]
        if e.get("shapes"):
            under.append("on " + ", ".join(map(str, e["shapes"])))  # type: ignore[call-overload]
        if (e.get("worst") and e["verdict"] != MATCH) or e.get("status") == "warning":
            under.append(f"worst: {e['worst']}")
        if e.get("reason"):
            under.append(str(e["reason"]))
        for text in under:
            lines += wrap(text, width, "    ", "      ")
    return lines


def process_entry(entries: list[dict[str, object]], calls: int) -> dict[str, object]:
    """This process's line of the JSON file."""
    argv = getattr(sys, "argv", None) or ["?"]
    return {
        "pid": os.getpid(),
        "rank": os.environ.get("RANK"),
        "world_size": os.environ.get("WORLD_SIZE"),
        "program": os.path.basename(str(argv[0])),
        "compare_calls": calls,
        "records": entries,
    }


def write_json(path: str, entry: dict[str, object]) -> None:
    """Append one line (one ``write``: concurrent ranks' lines never interleave); never through a symbolic link."""
    data = (json.dumps(entry) + "\n").encode()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
