"""Per-rank records merged into one view: what every rank shares once, what differs by rank.

A job of N ranks that prints a table per rank prints N copies of the same table, and the
one row that differs (the rank that runs another vendor) is lost among them. :func:`merge`
takes one mapping per rank (row key -> value, any JSON-able value) and returns, for each
row, its values with the ranks that have each, and the ranks that lack the row; a row is
``same`` when every rank has it with one value. :func:`format_merged` prints that: shared
rows once, then each differing row with a line per value. The rank check's table
(``rank_check.py``), the merged exit report (:func:`merge_reports`) and any other
per-rank table (a numerics comparison, say) use these two functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, cast

from fl_patch.reporting.layout import (
    NOT_IN_A_PACK,
    matches,
    owner_of,
    pack_lines,
    terminal_width,
    wrap,
)

__all__ = ["MergedRow", "format_merged", "merge", "merge_reports", "rank_ranges", "read_report_lines"]

Rank = Hashable  # an int rank, or a label such as "pid 4242" for a process without one


def _rank_order(rank: Rank) -> tuple[int, int, str]:
    return (0, rank, "") if isinstance(rank, int) else (1, 0, str(rank))


def rank_ranges(ranks: Iterable[Rank]) -> str:
    """``0-3,5,7`` for integer ranks (other labels follow, comma-separated); ``rank 2`` / ``ranks 0-3,5``."""
    ordered = sorted(set(ranks), key=_rank_order)
    ints = [r for r in ordered if isinstance(r, int)]
    parts: list[str] = []
    start = prev = None
    for r in ints:
        if start is None:
            start = prev = r
        elif r == prev + 1:  # type: ignore[operator]  # prev is an int once start is
            prev = r
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = r
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    parts += [str(r) for r in ordered if not isinstance(r, int)]
    single = len(ordered) == 1
    return ("rank " if single else "ranks ") + ",".join(parts)


class MergedRow:
    """One row over every rank: its distinct values, each with the ranks that have it; the ranks without it."""

    __slots__ = ("key", "missing", "values")

    def __init__(self, key: str, values: list[tuple[object, tuple[Rank, ...]]], missing: tuple[Rank, ...]) -> None:
        self.key = key
        self.values = values
        self.missing = missing

    @property
    def same(self) -> bool:
        return len(self.values) == 1 and not self.missing

    def __repr__(self) -> str:
        return f"MergedRow({self.key!r}, values={self.values!r}, missing={self.missing!r})"


def _hashable(value: object) -> Hashable:
    return json.dumps(value, sort_keys=True, default=str)


def merge(per_rank: Mapping[Any, Mapping[str, Any]]) -> list[MergedRow]:
    """Each row key of any rank, with its distinct values and their ranks (rows in first-seen order)."""
    ranks = sorted(per_rank, key=_rank_order)
    keys: dict[str, None] = {}
    for rank in ranks:
        keys.update(dict.fromkeys(per_rank[rank]))
    rows = []
    for key in keys:
        groups: dict[Hashable, tuple[object, list[Rank]]] = {}
        missing: list[Rank] = []
        for rank in ranks:
            row = per_rank[rank]
            if key not in row:
                missing.append(rank)
                continue
            value = row[key]
            groups.setdefault(_hashable(value), (value, []))[1].append(rank)
        values = sorted(
            ((v, tuple(rs)) for v, rs in groups.values()), key=lambda item: (-len(item[1]), _rank_order(item[1][0]))
        )
        rows.append(MergedRow(key, values, tuple(missing)))
    return rows


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def format_merged(
    rows: Sequence[MergedRow],
    *,
    show_same: bool = True,
    value_text: Callable[[object], str] = _text,
    missing_text: str = "(no such row)",
) -> list[str]:
    """Lines: each shared row once (``key  value``), then each differing row with a line per value and its ranks."""
    lines: list[str] = []
    same = [row for row in rows if row.same]
    differ = [row for row in rows if not row.same]
    width = max((len(row.key) for row in rows), default=0)
    if show_same:
        for row in same:
            lines.append(f"  {row.key:<{width}}  {value_text(row.values[0][0])}")
    for row in differ:
        lines.append(f"  {row.key}: differs")
        entries = [(value_text(value), ranks) for value, ranks in row.values]
        if row.missing:
            entries.append((missing_text, row.missing))
        label_width = max(len(rank_ranges(ranks)) for _, ranks in entries)
        for text, ranks in entries:
            lines.append(f"    {rank_ranges(ranks):<{label_width}}  {text}")
    return lines


# ------------------------------------------------------------------ the exit report, merged


def read_report_lines(lines: Iterable[str]) -> list[dict[str, object]]:
    """The JSON entries of a report file (``--report-file``: a line per process); lines that are not JSON are skipped."""
    entries = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("records"), list):
            entries.append(entry)
    return entries


def _process_key(entry: Mapping[str, object]) -> Rank:
    rank = entry.get("rank")
    if isinstance(rank, (int, str)):
        try:
            return int(rank)
        except ValueError:
            pass
    return f"pid {entry.get('pid', '?')}"


def _chosen(records: Iterable[Mapping[str, object]]) -> dict[str, Mapping[str, object]]:
    """Per target, the record of the registration that runs (or the problem), as the per-process report shows."""
    chosen: dict[str, Mapping[str, object]] = {}
    for record in records:
        status = record.get("status")
        if record.get("vendor") == record.get("chosen_vendor") or status in _PROBLEMS:
            chosen.setdefault(str(record.get("target")), record)
    return chosen


_PROBLEMS = ("target missing", "impl failed")
Identity = tuple[str, str, str, str]  # status, vendor, impl, detail: what must agree across ranks


def _identity(record: Mapping[str, object]) -> Identity:
    return (
        str(record.get("status")),
        str(record.get("chosen_vendor") or "-"),
        str(record.get("impl")),
        str(record.get("detail") or ""),
    )


def _describe(identity: object) -> str:
    status, vendor, impl, detail = cast(Identity, tuple(cast(Sequence[str], identity)))
    return f"{status} {vendor} -> {impl}" + (f"  ({detail})" if detail else "")


def _pack(record: Mapping[str, object]) -> str:
    """The pack a record belongs to: as the rank recorded it, else read from its source (``reporting/layout``)."""
    pack = record.get("pack")
    if isinstance(pack, str):
        return pack
    return owner_of(str(record.get("source", "?")))


def _record_matches(record: Mapping[str, object], only: Sequence[tuple[str, str]]) -> bool:
    for key, wanted in only:
        value = _pack(record) if key == "pack" else str(record.get(key) or "")
        if not matches(key, wanted, value):
            return False
    return True


def merge_reports(
    entries: Sequence[Mapping[str, object]],
    *,
    width: int | None = None,
    show_all: bool = False,
    only: Sequence[tuple[str, str]] = (),
) -> str:
    """One view of many processes' exit reports (the JSON entries ``--report-file`` writes), plugin first.

    Rows are per target: status, vendor and impl (what must agree across ranks) shown once
    when every rank has the same, per rank where they differ; the call counts (which
    legitimately differ: rank 0 logs, say) beside them, per rank only where they differ.
    Processes that imported no registered target (torchrun's agent, a helper) are counted,
    not tabled. The user's targets are listed in full; each shipped pack is one line of counts
    (``show_all``: in full), except its targets that differ by rank or have a problem; ``only``
    keeps the targets that match (as ``--only``), whoever registered them.
    """
    width = width or terminal_width()
    by_process: dict[Rank, dict[str, Mapping[str, object]]] = {}
    idle: list[Rank] = []
    pack_of: dict[str, str] = {}
    for entry in entries:
        raw = entry.get("records")
        records = [r for r in raw if isinstance(r, Mapping)] if isinstance(raw, list) else []
        chosen = _chosen(records)
        if all(r.get("status") == "waiting" for r in chosen.values()):
            idle.append(_process_key(entry))
            continue
        if only:
            chosen = {t: r for t, r in chosen.items() if _record_matches(r, only)}
        for target, record in chosen.items():
            pack_of.setdefault(target, _pack(record))
        by_process[_process_key(entry)] = chosen
    if not by_process:
        return f"fl_patch report, merged ({len(idle)} process(es)): no registered target was imported in any process"
    identity = merge({p: {t: list(_identity(r)) for t, r in rows.items()} for p, rows in by_process.items()})
    calls = {
        row.key: row
        for row in merge({p: {t: r.get("calls") for t, r in rows.items()} for p, rows in by_process.items()})
    }
    statuses = {row.key: {cast(Sequence[str], value)[0] for value, _ in row.values} for row in identity}
    waiting = [row for row in identity if row.same and statuses[row.key] == {"waiting"}]
    applied = [row for row in identity if row.same and statuses[row.key] == {"applied"}]
    problems = [row for row in identity if statuses[row.key] & set(_PROBLEMS)]
    differ = [row for row in identity if not row.same]
    lines = wrap(
        f"fl_patch report, merged over {len(by_process)} process(es) ({rank_ranges(by_process)}"
        + (f"; {len(idle)} more imported no registered target" if idle else "")
        + f"): {len(applied)} applied on every one, {len(differ)} differ, {len(problems)} problem(s)",
        width,
        "",
        "  ",
    )
    if only:
        lines += wrap(f"targets matching --only {', '.join(f'{k}={v}' for k, v in only)}: {len(identity)}", width)

    problem_keys = {row.key for row in problems}

    def listed(row: MergedRow) -> bool:
        mine = pack_of.get(row.key, NOT_IN_A_PACK) == NOT_IN_A_PACK
        return show_all or bool(only) or mine or row.key in problem_keys

    shown = [row for row in identity if row.same and row not in waiting and listed(row)]
    if shown:
        lines.append("the same on every process:")
        for row in sorted(shown, key=lambda r: r not in problems):
            lines += wrap(row.key, width, "  ")
            lines += wrap(f"{_describe(row.values[0][0])}  calls: {_calls(calls[row.key])}", width, "    ", "      ")
    if differ:
        lines.append("differs by process:")
        for row in differ:
            lines += wrap(row.key, width, "  ")
            for value, ranks in row.values:
                lines += wrap(_describe(value), width, f"    {rank_ranges(ranks)}: ", "      ")
            if row.missing:
                lines.append(f"    {rank_ranges(row.missing)}: not registered there")
    quiet = [row for row in waiting if listed(row)]
    if quiet:
        lines += wrap("never triggered on any process: " + ", ".join(row.key for row in quiet), width, "", "  ")
    folded = [row for row in identity if row.same and not listed(row)]
    if folded:
        lines += wrap("shipped packs, one line each (--report --all lists their rows, --only pack=NAME one's):", width)
        packs: dict[str, list[str]] = {}
        for row in folded:
            status = cast(Sequence[str], row.values[0][0])[0]
            packs.setdefault(pack_of[row.key], []).append("never triggered" if status == "waiting" else status)
        lines += pack_lines(packs, width, " (the same on every process)")
    return "\n".join(lines)


def _calls(row: MergedRow) -> str:
    if row.same:
        value = row.values[0][0]
        return "-" if value is None else f"{value} each"
    return ", ".join(f"{'-' if v is None else v} ({rank_ranges(ranks)})" for v, ranks in row.values)


def main(argv: list[str] | None = None) -> int:
    """``python -m fl_patch.job.merge FILE...``: the merged view of report files (``--report-file``; ``-``: stdin)."""
    import sys

    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        sys.stderr.write("usage: python -m fl_patch.job.merge REPORT_FILE... (the JSON lines --report-file wrote)\n")
        return 2
    entries: list[dict[str, object]] = []
    for path in paths:
        if path == "-":
            entries += read_report_lines(sys.stdin)
        else:
            with open(path, encoding="utf-8") as handle:
                entries += read_report_lines(handle)
    print(merge_reports(entries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
