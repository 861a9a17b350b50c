"""``--list`` and ``--check`` as text, plugin first (``reporting/layout.py`` says why).

Both print the user's registrations first and in full (ok ones too), problems first; then each
shipped pack as one line of counts, unless asked for (``full``: ``--all`` or any ``--only``).
Every line fits ``width``; a long cause is wrapped under its row, never cut.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from fl_patch.reporting.layout import NOT_IN_A_PACK, counts_text, pack_order, wrap

if TYPE_CHECKING:
    from fl_patch.diagnostics.check import CheckReport, CheckResult, Listed

__all__ = ["check_text", "listing"]

Row = TypeVar("Row", "Listed", "CheckResult")

_PROBLEM_STATUSES = ("target missing", "impl failed")
_LEVEL_ORDER = {"error": 0, "warning": 1, "skipped": 2, "not for this version": 3, "ok": 4}
_DOC_FIELDS = (("why", "why"), ("how", "how"), ("upstream", "upstream"), ("remove_when", "remove when"))
_PACK_HINT = "--all lists their rows, --only pack=NAME one pack's"


def _by_target(rows: Sequence[Row], rank: Callable[[Row], int]) -> list[list[Row]]:
    """Rows grouped by target (in their order), the groups with the worst row first."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.target, []).append(row)
    return sorted(groups.values(), key=lambda group: min(rank(row) for row in group))


def _packs(rows: Sequence[Row]) -> dict[str, list[Row]]:
    found: dict[str, list[Row]] = {}
    for row in rows:
        if row.pack != NOT_IN_A_PACK:
            found.setdefault(row.pack, []).append(row)
    return {name: found[name] for name in sorted(found, key=pack_order)}


def _pack_lines(packs: dict[str, list[Row]], status: Callable[[Row], str], verb: str, width: int) -> list[str]:
    name_width = max((len(name) for name in packs), default=0)
    count_width = max((len(str(len(rows))) for rows in packs.values()), default=0)
    lines = []
    for name, rows in packs.items():
        head = f"  {name:<{name_width}}  {len(rows):>{count_width}} {verb}: "
        lines += wrap(counts_text(status(row) for row in rows), width, head, " " * (len(head) + 2))
    return lines


def _yours_head(rows: Sequence[Row], verb: str) -> str:
    sources = sorted({row.source for row in rows})
    shown = ", ".join(sources[:3]) + (", ..." if len(sources) > 3 else "")
    return f"yours: {len(rows)} registration(s) {verb}, from {shown}"


_NO_PLUGIN = (
    "yours: none registered (--registry MODULE or FL_PATCH_REGISTRY names a registry module; an installed "
    "plugin declares one as an entry point of fl_patch.registries)"
)


# ------------------------------------------------------------------------------------- --list
def listing(listed: Sequence[Listed], *, full: bool, why: bool, width: int) -> str:
    """``--list``: the user's rows, each pack in one line (every row when ``full``); ``why``: each row's PatchDoc."""
    yours = [e for e in listed if e.pack == NOT_IN_A_PACK]
    packs = _packs(listed)
    lines: list[str] = []
    if yours:
        lines += wrap(_yours_head(yours, "listed") + "; * marks the vendor chosen on this machine", width)
        lines += _list_rows(yours, why=why, width=width, ours=True)
    elif not full or not packs:
        lines += wrap(_NO_PLUGIN, width)
    if packs and full:
        for name, rows in packs.items():
            lines += wrap(f"pack {name}: {len(rows)} registration(s): {counts_text(e.status for e in rows)}", width)
            lines += _list_rows(rows, why=why, width=width, ours=False)
    elif packs:
        lines += wrap(f"shipped packs, one line each ({_PACK_HINT}):", width)
        lines += _pack_lines(packs, lambda e: e.status, "registrations", width)
    targets = len({e.target for e in listed})
    in_packs = len(listed) - len(yours)
    lines += wrap(
        f"{len(listed)} registration(s) for {targets} target(s): {len(yours)} yours, {in_packs} in "
        f"{len(packs)} shipped pack(s)",
        width,
    )
    return "\n".join(lines) + "\n"


def _list_rank(entry: Listed) -> int:
    return 0 if entry.status in _PROBLEM_STATUSES else 1


def _list_rows(rows: Sequence[Listed], *, why: bool, width: int, ours: bool) -> list[str]:
    vendor_width = max(len(e.vendor) for e in rows)
    status_width = max(len(e.status) for e in rows)
    several_sources = len({e.source for e in rows}) > 1
    lines: list[str] = []
    for group in _by_target(rows, _list_rank):
        lines += wrap(group[0].target, width)
        for e in group:
            mark = "*" if e.vendor == e.chosen_vendor else " "
            head = f"  {mark} {e.vendor:<{vendor_width}}  {e.status:<{status_width}}  "
            text = e.impl
            if ours and several_sources:
                text += f"  (from {e.source})"
            if e.requires:
                text += f"  [requires {e.requires}]"
            lines += wrap(text, width, head, " " * (len(head) + 2))
            if e.status in _PROBLEM_STATUSES and e.detail:
                lines += wrap(e.detail, width, "      ")
            elif ours and e.vendor != e.chosen_vendor:
                lines += wrap(_not_chosen(e.vendor, e.chosen_vendor, e.detail), width, "      ", "        ")
            if why:
                lines += _doc_lines(e, width, ours)
    return lines


def _doc_lines(entry: Listed, width: int, ours: bool) -> list[str]:
    if entry.doc is None:
        if not ours:
            return []
        return wrap(
            "(no PatchDoc: register(..., doc=fl_patch.PatchDoc(why=..., how=..., upstream=..., remove_when=...)) "
            "gives it one)",
            width,
            "      ",
        )
    lines = []
    for key, label in _DOC_FIELDS:
        value = entry.doc.get(key)
        if value:
            lines += wrap(value, width, f"      {label}: ", "        ")
    return lines


# ------------------------------------------------------------------------------------ --check
def _notes(r: CheckResult) -> list[str]:
    notes = [f"{f.level}: {f.message}" for f in r.findings] + ([f"skipped: {r.skipped}"] if r.skipped else [])
    gate = r.not_for_version
    if gate and gate.endswith("(megatron-core not installed)"):
        gate = "not for this version: megatron-core is not installed, so no version gate holds"  # one cause, said once
    return notes + ([gate] if gate else [])


def _not_chosen(vendor: str, chosen_vendor: str | None, detail: str | None = None) -> str:
    """A user's row whose vendor is not the one chosen here: what runs instead (the engine's ``detail`` where
    the row has it), and the setting that picks it."""
    runs = detail or (
        f"vendor {chosen_vendor}'s impl runs" if chosen_vendor else "upstream runs (no impl of the vendors here)"
    )
    return f"not chosen here: {runs}; MG_FL_PREFER={vendor} chooses it"


def _check_rank(r: CheckResult) -> int:
    return _LEVEL_ORDER.get(r.level, 5)


def check_text(report: CheckReport, *, full: bool, width: int) -> str:
    """``--check`` as text: problems of the sources, the user's rows, each pack in a line, activation, a summary.

    ``full`` (``--all`` or ``--only``): every row asked for, grouped by pack; a cause shared by
    many of a pack's rows (megatron-core not installed) said once, with the count. Without it,
    a pack's rows appear only where they are errors (``--check`` fails on them).
    """
    lines = wrap(
        f"megatron-core {report.megatron_core or 'not installed'}; vendors here: {', '.join(report.vendors)}; "
        "* marks the vendor chosen here",
        width,
    )
    for problem in report.source_problems:
        lines += wrap(problem, width, "error: ", "  ")
    yours = [r for r in report.results if r.pack == NOT_IN_A_PACK]
    packs = _packs(report.results)
    if yours:
        lines += wrap(f"{_yours_head(yours, 'checked')}: {counts_text(r.level for r in yours)}", width)
        lines += _check_rows(yours, width, shared=set())
    elif not full or not packs:
        lines += wrap(_NO_PLUGIN, width)
    for message in report.messages:
        lines += wrap(message, width, "warning: ", "  ")
    if packs and full:
        for name, rows in packs.items():
            lines += wrap(f"pack {name}: {len(rows)} checked: {counts_text(r.level for r in rows)}", width)
            shared = _shared_causes(rows)
            lines += _check_rows(rows, width, shared=set(shared))
            lines += _shared_lines(shared, width)
        for note in report.notes:
            lines += wrap(note, width, "note: ", "  ")
    elif packs:
        lines += wrap(f"shipped packs, one line each ({_PACK_HINT}):", width)
        lines += _pack_lines(packs, lambda r: r.level, "checked", width)
        failing = [r for rows in packs.values() for r in rows if r.level == "error"]
        if failing:
            lines += wrap("errors in shipped packs:", width)
            lines += _shared_rows(failing, width)
        if report.notes:
            lines += wrap(f"({len(report.notes)} note(s) about the packs and this machine: --all shows them)", width)
    if report.activation is not None:
        state = "ok" if report.activation.get("ok") else "error"
        lines += wrap(f"activation: {state}: {report.activation.get('detail')}", width, "", "  ")
    errors = sum(r.level == "error" for r in report.results) + len(report.source_problems)
    lines += wrap(
        f"{len(report.results)} registration(s) checked: {errors} error(s); {len(yours)} yours, "
        f"{len(report.results) - len(yours)} in {len(packs)} shipped pack(s)",
        width,
    )
    return "\n".join(lines) + "\n"


def _shared_lines(shared: dict[str, list[CheckResult]], width: int) -> list[str]:
    """Each cause many rows share, said once with its count and the first targets."""
    lines: list[str] = []
    for note, count_rows in sorted(shared.items(), key=lambda item: -len(item[1])):
        targets = sorted({r.target for r in count_rows})
        lines += wrap(note, width, "  ", "    ")
        lines += wrap(f"(the same for {len(count_rows)} registrations: {', '.join(targets[:3])}, ...)", width, "    ")
    return lines


def _shared_rows(rows: Sequence[CheckResult], width: int) -> list[str]:
    """Rows with a cause of their own in full; causes many rows share once each (megatron-core not installed)."""
    shared = _shared_causes(rows)
    alone = [r for r in rows if not all(note in shared for note in _notes(r))]
    return (_check_rows(alone, width, shared=set(shared)) if alone else []) + _shared_lines(shared, width)


def _shared_causes(rows: Sequence[CheckResult]) -> dict[str, list[CheckResult]]:
    count: dict[str, list[CheckResult]] = {}
    for r in rows:
        for note in dict.fromkeys(_notes(r)):
            count.setdefault(note, []).append(r)
    return {note: rs for note, rs in count.items() if len(rs) >= 3}


def _check_rows(rows: Sequence[CheckResult], width: int, *, shared: set[str]) -> list[str]:
    level_width = max(len(r.level) for r in rows)
    vendor_width = max(len(r.vendor) for r in rows)
    lines: list[str] = []
    for group in _by_target(rows, _check_rank):
        lines += wrap(group[0].target, width)
        for r in group:
            mark = "*" if r.vendor == r.chosen_vendor else " "
            found = "target found" if r.target_found else "TARGET MISSING"
            loads = "impl loads" if r.impl_loaded else ("impl skipped" if r.skipped else "IMPL FAILS")
            head = f"  {mark} {r.vendor:<{vendor_width}}  {r.level:<{level_width}}  "
            lines += wrap(f"{r.kind or '-'}, {found}, {loads}, signature {r.signature}", width, head, " " * len(head))
            where = f"  (registered at {r.where})" if r.where and r.pack == NOT_IN_A_PACK else ""
            lines += wrap(f"impl {r.impl}{where}", width, "      ", "        ")
            if r.pack == NOT_IN_A_PACK and r.engine_status is not None and r.vendor != r.chosen_vendor:
                lines += wrap(_not_chosen(r.vendor, r.chosen_vendor), width, "      ", "        ")
            for note in _notes(r):
                if note not in shared:
                    lines += wrap(note, width, "      ", "        ")
    return lines
