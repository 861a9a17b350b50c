"""The index of every registration of every shipped pack: ``python -m fl_patch.impls.index`` writes ``docs/patches.md``.

Like vllm-ascend's ``patch/__init__.py``, the index says for each patch what it replaces, why, how,
the upstream reference and when it can be removed; here it is generated from the registrations
themselves (their ``PatchDoc``), so it cannot drift from what the packs register.

How the registrations are found: each pack's ``register_pack()`` (``fl_patch.impls.PACKS``) is run
into this process's registry, which must be empty (run it as a plain ``python``, not under
``python -m fl_patch``), with every machine condition of ``fl_patch.impls.conditions`` assumed true,
so that the index lists every registration whatever this machine has; then once more per condition
with that one assumed false: what disappears depends on it. fl_patch's own registration (the rank
check, ``fl_patch.job.registry``, loaded with the packs) is listed after them.

Usage::

    python -m fl_patch.impls.index            # writes docs/patches.md of this checkout
    python -m fl_patch.impls.index --check    # exit 1 if docs/patches.md differs from what it would write
    python -m fl_patch.impls.index --json     # one JSON list of the registrations, with their four fields
    python -m fl_patch.impls.index --output FILE
"""

from __future__ import annotations

import argparse
import importlib
import json
import runpy
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fl_patch.core.registration import PatchDoc, Registration
from fl_patch.impls import PACKS
from fl_patch.impls.conditions import ALL, Condition, assuming
from fl_patch.runtime import RUNTIME

__all__ = ["Entry", "collect", "main", "render"]

_REPO = Path(__file__).resolve().parents[3]
DEFAULT_OUTPUT = _REPO / "docs" / "patches.md"
_OWN = "fl_patch.job.registry"  # fl_patch's own registration, loaded with the packs (not a pack)
_OWN_NAME = "fl_patch itself"


@dataclass
class Entry:
    """One registration as the index lists it (the same target and impl for several vendors: one entry)."""

    pack: str
    source: str
    target: str
    impl: str
    vendors: list[str]
    create: bool
    requires: str | None
    conditions: list[str]
    doc: PatchDoc | None
    included_by: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        fields = (
            self.doc.as_dict() if self.doc is not None else dict.fromkeys(("why", "how", "upstream", "remove_when"))
        )
        return {
            "pack": self.pack,
            "source": self.source,
            "target": self.target,
            "impl": self.impl,
            "vendors": self.vendors,
            "create": self.create,
            "requires": self.requires,
            "conditions": self.conditions,
            "included_by": self.included_by,
            **fields,
        }


def _pack_of(source: str) -> str:
    """``fl_patch.impls.te.registry`` -> ``te``; fl_patch's own registry -> its section name."""
    if source == _OWN:
        return _OWN_NAME
    parts = source.split(".")
    return parts[2] if len(parts) == 4 and parts[:2] == ["fl_patch", "impls"] and parts[3] == "registry" else source


class _Recorder:
    """The registry's listener while the index runs: each registration, in call order."""

    def __init__(self) -> None:
        self.made: list[Registration] | None = None
        self.listening_to: object = None  # the registry it was added to (once)

    def __call__(self, batch: list[Registration]) -> None:  # one batch per register(): no source is loading here
        if self.made is not None:
            self.made.extend(batch)


_RECORDER = _Recorder()


def _run(register_all: Callable[[], None]) -> list[Registration]:
    """The registrations ``register_all`` makes, in call order, in this process's (emptied) registry."""
    registry = RUNTIME.registry
    if _RECORDER.listening_to is not registry:
        registry.add_listener(_RECORDER)
        _RECORDER.listening_to = registry
    registry.clear()
    made: list[Registration] = []
    _RECORDER.made = made
    try:
        register_all()
    finally:
        _RECORDER.made = None
        registry.clear()
    return made


def _register_everything() -> None:
    for spec in PACKS.values():
        module, _, function = spec.partition(":")
        getattr(importlib.import_module(module), function)()
    runpy.run_module(_OWN, run_name=_OWN)  # it registers when its body runs


def _key(registration: Registration) -> tuple[str, str]:
    return registration.target, registration.vendor


def collect() -> list[Entry]:
    """Every registration of every shipped pack, with the conditions it depends on, in registry order."""
    if RUNTIME.installed or RUNTIME.registry.registrations():
        raise RuntimeError("the index runs in a plain process: fl_patch is installed here, or registrations exist")
    everything = {condition: True for condition in ALL}
    with assuming(everything):
        full = _run(_register_everything)
    keys = [_key(r) for r in full]
    if len(set(keys)) != len(keys):
        raise RuntimeError("a target and vendor registered twice by the packs")
    depends: dict[tuple[str, str], list[Condition]] = {key: [] for key in keys}
    for condition in ALL:
        with assuming({**everything, condition: False}):
            without = {_key(r) for r in _run(_register_everything)}
        if not without <= set(keys):
            raise RuntimeError(f"registrations made only when {condition.name} is false: {sorted(without - set(keys))}")
        for key in set(keys) - without:
            depends[key].append(condition)
    included = _included_by()
    entries: dict[tuple[object, ...], Entry] = {}
    for registration in full:
        conditions = [c.name for c in depends[_key(registration)]]
        row: tuple[object, ...] = (registration.source, registration.target, registration.impl_name)
        row += (registration.create, registration.requires, tuple(conditions), registration.doc)
        entry = entries.get(row)
        if entry is None:
            pack = _pack_of(registration.source)
            entries[row] = Entry(
                pack=pack,
                source=registration.source,
                target=registration.target,
                impl=registration.impl_name,
                vendors=[registration.vendor],
                create=registration.create,
                requires=registration.requires,
                conditions=conditions,
                doc=registration.doc,
                included_by=included.get(pack, []),
            )
        elif registration.vendor not in entry.vendors:
            entry.vendors.append(registration.vendor)
    return list(entries.values())


def _included_by() -> dict[str, list[str]]:
    """For each pack another pack registers, the packs that do (run one pack at a time)."""
    found: dict[str, list[str]] = {}
    everything = {condition: True for condition in ALL}
    for name, spec in PACKS.items():
        module, _, function = spec.partition(":")
        with assuming(everything):
            made = _run(getattr(importlib.import_module(module), function))
        for pack in dict.fromkeys(_pack_of(r.source) for r in made):
            if pack != name:
                found.setdefault(pack, []).append(name)
    return found


# ------------------------------------------------------------------------------------------------ markdown
_HEADER = """# The patch index

Every registration of every pack fl_patch ships, with why it exists, how it works, the upstream
reference and when it can be removed. Generated from the registrations themselves (each
`register(..., doc=PatchDoc(...))` of the packs' registries) by `python -m fl_patch.impls.index`; do not
edit by hand: `tests/impls/test_index.py` fails when this file differs from what the command writes.
`fl-patch --list --why` prints the same four fields for the registrations of a running setup.

Packs are selected with `FL_PATCH_PACKS` / `--packs` (`cpu`, `cuda_on_cpu`, `flaggems`; default all);
`te` and `without_te` are shared packs, registered by the packs that build on them, for those packs'
own vendors. A registration applies only where its vendor is chosen (`MG_FL_PREFER`, else the
detected platform), its condition holds on the machine and its version gate admits the installed
megatron-core.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`"


def render(entries: list[Entry]) -> str:
    """The markdown of ``entries`` (deterministic: the same registrations give the same text on any machine)."""
    lines = [_HEADER]
    total = sum(len(entry.vendors) for entry in entries)
    packs = list(dict.fromkeys(entry.pack for entry in entries))
    lines.append(
        f"{total} registrations ({len(entries)} rows: a row registered for several vendors is one row) in "
        f"{len(packs)} sections: " + ", ".join(f"[{pack}](#{_anchor(pack)})" for pack in packs) + "."
    )
    lines += ["", "## Conditions", "", "| condition | holds where |", "|---|---|"]
    lines += [f"| `{condition.name}` | {_cell(condition.meaning)} |" for condition in ALL]
    lines.append("")
    for pack in packs:
        lines += _render_pack(pack, [entry for entry in entries if entry.pack == pack])
    return "\n".join(lines).rstrip() + "\n"


def _anchor(pack: str) -> str:
    return "pack-" + pack.replace(" ", "-").replace("_", "")


def _render_pack(pack: str, entries: list[Entry]) -> list[str]:
    sources = sorted({entry.source for entry in entries})
    vendors = sorted({vendor for entry in entries for vendor in entry.vendors})
    title = pack if pack == _OWN_NAME else f"pack `{pack}`"
    lines = [f'<a id="{_anchor(pack)}"></a>', f"## {title}", ""]
    where = ", ".join(f"`src/{source.replace('.', '/')}.py`" for source in sources)
    about = f"Registry: {where}; vendor{'s' if len(vendors) > 1 else ''} {', '.join(vendors)}"
    included_by = entries[0].included_by
    if included_by:
        about += f"; registered by the pack{'s' if len(included_by) > 1 else ''} {', '.join(included_by)}"
    total = sum(len(entry.vendors) for entry in entries)
    lines += [f"{about}; {total} registrations.", ""]
    groups: dict[PatchDoc | None, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.doc, []).append(entry)
    for number, (doc, members) in enumerate(groups.items(), 1):
        first = members[0].target
        more = f" and {len(members) - 1} more" if len(members) > 1 else ""
        lines += [f"### {pack}.{number}: `{first}`{more}", ""]
        lines += ["| target | impl | vendor | condition | version gate |", "|---|---|---|---|---|"]
        for entry in members:
            target = _code(entry.target) + (" (created)" if entry.create else "")
            condition = ", ".join(_code(c) for c in entry.conditions) or "always"
            gate = _code(entry.requires) if entry.requires else ""
            lines.append(f"| {target} | {_code(entry.impl)} | {', '.join(entry.vendors)} | {condition} | {gate} |")
        lines.append("")
        if doc is None:
            lines += ["**No PatchDoc**: this registration says nothing about why it exists.", ""]
            continue
        lines += [
            f"- **Why**: {doc.why}",
            f"- **How**: {doc.how}",
            f"- **Upstream**: {doc.upstream}",
            f"- **Remove when**: {doc.remove_when}",
            "",
        ]
    return lines


def missing_fields(entries: list[Entry]) -> list[str]:
    """``target (vendors): field`` for each registration without a PatchDoc or with an empty field."""
    problems = []
    for entry in entries:
        fields = entry.doc.as_dict() if entry.doc is not None else {}
        for name in ("why", "how", "upstream", "remove_when"):
            if not str(fields.get(name) or "").strip():
                problems.append(f"{entry.target} ({', '.join(entry.vendors)}): no {name}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fl_patch.impls.index", description=__doc__.split("\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="exit 1 if the index file differs from the generated one")
    action.add_argument("--json", action="store_true", help="print the registrations as one JSON list")
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help=f"the index file (default {DEFAULT_OUTPUT})"
    )
    args = parser.parse_args(argv)
    entries = collect()
    if args.json:
        print(json.dumps([entry.as_dict() for entry in entries], indent=1))
        return 0
    problems = missing_fields(entries)
    text = render(entries)
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text or problems:
            print(f"{args.output} is out of date: run python -m fl_patch.impls.index", file=sys.stderr)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            return 1
        print(f"{args.output}: up to date ({sum(len(e.vendors) for e in entries)} registrations)")
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}: {sum(len(e.vendors) for e in entries)} registrations, {len(entries)} rows")
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
