"""What the compare says at exit: the table (worst first) and the JSON records, one line per process.

Every applied patch of the vendor chosen here has a record: the targets compared, and the others
with the reason they were not. The text table lists the compared targets and those not compared for
a reason of their own; targets that compute nothing themselves (module attributes, whole modules,
names a registration created) are counted in one line and listed in the JSON only.

A record (``results.TargetResult.as_record`` plus the engine's vendor and impl, and the rank)::

    {"target", "vendor", "impl", "kind", "calls", "calls_seen", "verdict": "match"|"differs"|"not compared",
     "status": "pass"|"warning"|"error"|null, "max_abs", "max_rel", "cosine", "leaves", "worst",
     "shapes", "reason", "rank"}

The file gets one line per process, ``{"pid", "rank", "world_size", "program", "compare_calls", "records"}``:
under torchrun each rank appends its own (one ``write`` each, so lines never interleave), and
``results.merge`` merges the records of all lines by target.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from typing import Any

from fl_patch.compare.results import DIFFERS, MATCH, NEVER_CALLED, NOT_COMPARED, RESULTS

__all__ = ["format_table", "process_entry", "records", "write_json"]

WIDTH = 120
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
        entry.update(vendor=record.vendor, impl=record.impl, rank=rank)
        entry.setdefault("kind", record.kind)
        out[record.target] = entry
    for target, result in list(RESULTS.by_target.items()):
        if target not in out:
            out[target] = {**result.as_record(), "vendor": None, "impl": None, "rank": rank}
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


def format_table(entries: list[dict[str, object]], calls: int, label: str | None = None) -> str:
    """The text table: a summary line, then one row per target, worst first, with its impl and reason under it."""
    shown = [e for e in entries if _quiet(e) is None]
    quiet: dict[str, int] = {}
    for e in entries:
        why = _quiet(e)
        if why is not None:
            quiet[why] = quiet.get(why, 0) + 1
    count = {v: sum(e["verdict"] == v for e in entries) for v in (DIFFERS, MATCH, NOT_COMPARED)}
    head = (
        f"fl_patch compare ({label or _label()}): the first {calls} call(s) of each patch against upstream: "
        f"{count[DIFFERS]} differ, {count[MATCH]} match, {count[NOT_COMPARED]} not compared"
    )
    lines = textwrap.wrap(head, WIDTH, subsequent_indent="  ")
    if shown:
        lines.append(f"{'verdict':<12}  {'calls':>5}  {'max abs':>8}  {'max rel':>8}  {'cosine':>8}  target")
    indent = " " * 52
    for e in shown:
        cosine = _number(e.get("cosine"), ".6f")
        lines.append(
            f"{e['verdict']!s:<12}  {e.get('calls') or 0:>5}  {_number(e.get('max_abs')):>8}  "
            f"{_number(e.get('max_rel')):>8}  {cosine:>8}  {e['target']}"
        )
        under = [f"-> {e.get('impl') or '?'}" + (f" (vendor {e['vendor']})" if e.get("vendor") else "")]
        if e.get("shapes"):
            under.append("on " + ", ".join(map(str, e["shapes"])))  # type: ignore[call-overload]
        if (e.get("worst") and e["verdict"] != MATCH) or e.get("status") == "warning":
            under.append(f"worst: {e['worst']}")
        if e.get("reason"):
            under.append(str(e["reason"]))
        for text in under:
            lines += textwrap.wrap(
                text, WIDTH, initial_indent=indent, subsequent_indent=indent + "   ", break_on_hyphens=False
            )
    if quiet:
        counted = "; ".join(f"{count} {why}" for why, count in quiet.items())
        lines += textwrap.wrap(
            f"not compared, not listed: {counted} (the JSON lists them)", WIDTH, subsequent_indent="  "
        )
    return "\n".join(lines)


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
