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


def merge(per_rank: Mapping[Rank, Mapping[str, object]]) -> list[MergedRow]:
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
        values = sorted(((v, tuple(rs)) for v, rs in groups.values()), key=lambda item: (-len(item[1]), _rank_order(item[1][0])))
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
    try:
        return int(rank)  # type: ignore[arg-type]  # a str or int in the JSON, or None
    except (TypeError, ValueError):
        return f"pid {entry.get('pid', '?')}"


def _chosen(records: Iterable[Mapping[str, object]]) -> dict[str, Mapping[str, object]]:
    """Per target, the record of the registration that runs (or the problem), as the per-process report shows."""
    chosen: dict[str, Mapping[str, object]] = {}
    for record in records:
        status = record.get("status")
        if record.get("vendor") == record.get("chosen_vendor") or status in ("target missing", "impl failed"):
            chosen.setdefault(str(record.get("target")), record)
    return chosen


def merge_reports(entries: Sequence[Mapping[str, object]]) -> str:
    """One view of many processes' exit reports (the JSON entries ``--report-file`` writes).

    Rows are per target: status, vendor and impl (what must agree across ranks) shown once
    when every rank has the same, per rank where they differ; the call counts (which
    legitimately differ: rank 0 logs, say) beside them, per rank only where they differ.
    Processes that imported no registered target (torchrun's agent, a helper) are counted,
    not tabled.
    """
    by_process: dict[Rank, dict[str, Mapping[str, object]]] = {}
    idle: list[Rank] = []
    for entry in entries:
        key = _process_key(entry)
        records = [r for r in entry.get("records", []) if isinstance(r, Mapping)]  # type: ignore[union-attr]
        chosen = _chosen(records)
        if all(r.get("status") == "waiting" for r in chosen.values()):
            idle.append(key)
            continue
        by_process[key] = chosen
    if not by_process:
        return f"fl_patch report, merged ({len(idle)} process(es)): no registered target was imported in any process"
    identity = merge(
        {p: {t: [r.get("status"), r.get("chosen_vendor"), r.get("impl"), r.get("detail") or ""] for t, r in rows.items()}
         for p, rows in by_process.items()}
    )  # fmt: skip
    calls = {row.key: row for row in merge({p: {t: r.get("calls") for t, r in rows.items()} for p, rows in by_process.items()})}
    processes = rank_ranges(by_process)
    applied_everywhere = [row for row in identity if row.same and row.values[0][0][0] == "applied"]  # type: ignore[index]
    waiting_everywhere = [row for row in identity if row.same and row.values[0][0][0] == "waiting"]  # type: ignore[index]
    problems = [row for row in identity if any(v[0] in ("target missing", "impl failed") for v, _ in row.values)]  # type: ignore[index]
    differ = [row for row in identity if not row.same]
    head = (
        f"fl_patch report, merged over {len(by_process)} process(es) ({processes}"
        + (f"; {len(idle)} more imported no registered target" if idle else "")
        + f"): {len(applied_everywhere)} applied on every one, {len(differ)} differ, {len(problems)} problem(s)"
    )
    lines = [head]
    shown = [row for row in identity if row.same and row not in waiting_everywhere]
    if shown:
        lines.append("same on every process:")
        for row in shown:
            status, vendor, impl, detail = row.values[0][0]  # type: ignore[misc]
            lines.append(f"  {status:<8} {vendor or '-':<8} {row.key}")
            lines.append(f"  {'':<8} {'':<8} -> {impl}" + (f"  ({detail})" if detail else "") + f"  calls: {_calls(calls[row.key])}")
    if differ:
        lines.append("differs by process:")
        for row in differ:
            lines.append(f"  {row.key}")
            entries_ = [(v, ranks) for v, ranks in row.values]
            for value, ranks in entries_:
                status, vendor, impl, detail = value  # type: ignore[misc]
                lines.append(f"    {rank_ranges(ranks)}: {status} {vendor or '-'} -> {impl}" + (f"  ({detail})" if detail else ""))
            if row.missing:
                lines.append(f"    {rank_ranges(row.missing)}: not registered there")
    if waiting_everywhere:
        lines.append("never triggered on any process: " + ", ".join(row.key for row in waiting_everywhere))
    return "\n".join(lines)


def _calls(row: MergedRow) -> str:
    if row.same:
        value = row.values[0][0]
        return "-" if value is None else f"{value} each"
    return ", ".join(f"{'-' if v is None else v} ({rank_ranges(ranks)})" for v, ranks in row.values)
