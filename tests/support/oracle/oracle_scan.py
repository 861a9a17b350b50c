"""Write the oracle's catalogue: every function, method, property and class defined in megatron.

Run it under fl_patch, in a process of its own (it imports every module it can)::

    python -m fl_patch tests/support/oracle/oracle_scan.py [--out FILE] [--packages megatron.core,megatron.training]
    python tests/support/oracle/oracle_scan.py --select --kinds classes --sample 100 --seed 1 --out sel.json

The first form imports every module of the packages (as this machine imports them: the CPU pack
and the CUDA-on-CPU transfer in place) and lists, per module, the objects *defined* there
(``__module__`` is the module, and the name they are bound to is their own ``__qualname__``; an
alias bound under another name is listed once, where it is defined, and counted as an alias).
For each, it builds the oracle's copy once (``oracle_impls.build``): where that fails (an Enum
with members, ...) the entry is kept with the reason in ``skip``. A target that a pack of
fl_patch registers is skipped too (the pack's vendor wins there, so a copy would never run).

The second form (``--select``) reads a catalogue and writes the entries a selection keeps
(``oracle_catalogue.select``: ``--kinds``, ``--modules``, ``--exclude``, ``--sample``/``--seed``).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import pkgutil
import sys
import time
import traceback
import types
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle_catalogue as catalogue


def _version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def import_all(packages: list[str]) -> tuple[list[str], dict[str, str]]:
    """Import every module below ``packages``; (modules imported, {module: why it failed})."""
    imported: list[str] = []
    failed: dict[str, str] = {}
    todo = list(reversed(packages))
    while todo:
        name = todo.pop()
        try:
            module = importlib.import_module(name)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            failed[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            continue
        imported.append(name)
        path = getattr(module, "__path__", None)
        if path is None:
            continue
        children = sorted(info.name for info in pkgutil.iter_modules(path, name + "."))
        todo.extend(reversed(children))
    return imported, failed


def _is_lru(obj: object) -> bool:
    return type(obj).__name__ == "_lru_cache_wrapper"


def _function_of(raw: object) -> object:
    """The function a member is made of (for its ``__module__``/``__qualname__``)."""
    if isinstance(raw, (staticmethod, classmethod)):
        return raw.__func__
    if isinstance(raw, property):
        return raw.fget
    if isinstance(raw, functools.cached_property):
        return raw.func
    return raw


def _member_form(raw: object) -> str | None:
    if isinstance(raw, staticmethod):
        return "staticmethod"
    if isinstance(raw, classmethod):
        return "classmethod"
    if isinstance(raw, property):
        return "property"
    if isinstance(raw, functools.cached_property):
        return "cached_property"
    if _is_lru(raw):
        return "lru_cache_method"
    if isinstance(raw, types.FunctionType):
        return "method"
    return None


class Scanner:
    """Entries of one process's modules; ``pack_targets`` are skipped (a pack's impl runs there)."""

    def __init__(self, pack_targets: dict[str, str]) -> None:
        self.pack_targets = pack_targets
        self.entries: list[dict[str, str]] = []
        self.aliases = 0
        self.other: Counter[str] = Counter()  # objects defined here that are none of the forms

    def add(self, target: str, form: str, module: str, obj: object) -> None:
        skip = ""
        if target in self.pack_targets:
            skip = f"a pack registers it ({self.pack_targets[target]}): its impl runs there, never the copy"
        else:
            original = obj.__func__ if form in ("staticmethod", "classmethod") else obj  # what fl_patch.original gives
            try:
                import oracle_impls

                oracle_impls.build(form, original, catalogue.impl_name(target, form))
            except Exception as exc:  # noqa: BLE001  (the class's own machinery refusing a subclass, ...)
                skip = f"no copy: {type(exc).__name__}: {exc}"[:300]
        family = catalogue.FORMS[form][0]
        self.entries.append({"target": target, "family": family, "form": form, "module": module, "skip": skip})

    def module(self, name: str, module: types.ModuleType) -> None:
        for attr, obj in list(vars(module).items()):
            if getattr(obj, "__module__", None) != name:
                continue
            qualname = getattr(obj, "__qualname__", None)
            if qualname != attr:
                if isinstance(obj, (type, types.FunctionType)) or _is_lru(obj):
                    self.aliases += 1  # listed where it is defined, under its own name
                continue
            target = f"{name}.{attr}"
            if isinstance(obj, type):
                self.add(target, "class", name, obj)
                self.members(name, target, obj)
            elif isinstance(obj, types.FunctionType):
                self.add(target, "function", name, obj)
            elif _is_lru(obj):
                self.add(target, "lru_cache", name, obj)
            else:
                self.other[f"{type(obj).__module__}.{type(obj).__qualname__}"] += 1

    def members(self, module: str, path: str, cls: type) -> None:
        for attr, raw in list(vars(cls).items()):
            if isinstance(raw, type):
                if raw.__module__ == module and raw.__qualname__ == f"{cls.__qualname__}.{attr}":
                    self.add(f"{path}.{attr}", "class", module, raw)
                    self.members(module, f"{path}.{attr}", raw)
                continue
            form = _member_form(raw)
            if form is None:
                continue
            function = _function_of(raw)
            if not (
                getattr(function, "__module__", None) == module
                and getattr(function, "__qualname__", None) == f"{cls.__qualname__}.{attr}"
            ):
                if form != "property" or getattr(function, "__module__", None) == module:
                    self.aliases += 1
                continue
            self.add(f"{path}.{attr}", form, module, raw)


def pack_targets() -> dict[str, str]:
    """Targets where a pack's impl (any source but the oracle) runs here, with whose: the oracle's
    registration (vendor ``default``, last in every priority list) would never be chosen there."""
    import fl_patch

    found: dict[str, str] = {}
    for record in fl_patch.report():
        if record.source != "oracle_registry" and record.status.value == "applied":
            found.setdefault(record.target, f"{record.source}, vendor {record.vendor}")
    return found


def scan(packages: list[str]) -> dict[str, Any]:
    start = time.perf_counter()
    imported, failed = import_all(packages)
    seconds = time.perf_counter() - start
    scanner = Scanner(pack_targets())
    for name in sorted(imported):
        module = sys.modules.get(name)
        if isinstance(module, types.ModuleType):
            scanner.module(name, module)
    entries = scanner.entries
    counts = Counter(e["form"] for e in entries if not e["skip"])
    skipped = Counter(
        e["skip"].split(":")[0] if e["skip"].startswith("no copy") else "pack" for e in entries if e["skip"]
    )
    return {
        "megatron_core": _version("megatron-core"),
        "torch": _version("torch"),
        "python": sys.version.split()[0],
        "packages": packages,
        "modules_imported": len(imported),
        "modules_failed": failed,
        "import_seconds": round(seconds, 1),
        "registrable": sum(counts.values()),
        "by_form": dict(sorted(counts.items())),
        "skipped": dict(skipped),
        "aliases_not_listed": scanner.aliases,
        "other_objects_defined": dict(scanner.other.most_common()),
        "modules": sorted(imported),
        "entries": catalogue.pack(entries),
    }


CLASSES_HEADER = '''"""Written by oracle_scan.py: where the oracle's class copies live, for pickle and for inspect.

Each copy (``oracle_impls.copy_class``) says its ``__module__`` is this one and its ``__qualname__``
its impl name. pickle finds it through ``__getattr__`` (which asks ``oracle_impls``, where it is
built and kept); ``inspect.getsource`` finds the top-level ``class`` statement of that name below,
as it finds a plugin's own class (upstream code reads the source of every class along a config's
``__bases__`` and parses it as it is). The stand-ins those statements make are deleted at the end,
so that every name reaches ``__getattr__``.
"""

import oracle_impls


def __getattr__(name: str) -> object:
    return getattr(oracle_impls, name)

'''

CLASSES_FOOTER = """
for _name in [n for n in globals() if n.startswith("k_")]:
    del globals()[_name]
"""


def write_classes_module(entries: list[dict[str, str]], path: Path) -> int:
    """``oracle_classes.py`` for ``entries``: one ``class <impl name>`` statement per class entry."""
    names = [catalogue.impl_name(e["target"], "class") for e in entries if e["form"] == "class"]
    body = "".join(f"\nclass {name}:\n    __slots__ = ()\n\n" for name in names)
    path.write_text(CLASSES_HEADER + body + CLASSES_FOOTER, encoding="utf-8")
    return len(names)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=catalogue.CATALOGUE)
    p.add_argument("--packages", default="megatron.core,megatron.training")
    p.add_argument("--select", action="store_true", help="write a selection of --catalogue instead of scanning")
    p.add_argument("--catalogue", type=Path, default=catalogue.CATALOGUE)
    p.add_argument("--kinds", default="", help=f"comma-separated families: {', '.join(catalogue.FAMILIES)}")
    p.add_argument("--modules", default="", help="comma-separated module prefixes")
    p.add_argument("--exclude", default="", help="comma-separated targets (or prefixes ending in '.') left out")
    p.add_argument("--sample", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-family", action="store_true", help="--sample N of each family")
    args = p.parse_args(argv)
    if args.select:
        data = catalogue.load(args.catalogue)
        chosen = catalogue.select(
            data["entries"],  # type: ignore[arg-type]
            kinds=args.kinds,
            modules=args.modules,
            exclude=args.exclude,
            sample=args.sample,
            seed=args.seed,
            per_family=args.per_family,
        )
        args.out.write_text(
            json.dumps({"selected_from": str(args.catalogue), "entries": catalogue.pack(chosen)}) + "\n"
        )
        print(f"{len(chosen)} entries -> {args.out}")
        return 0
    try:
        data = scan([p.strip() for p in args.packages.split(",") if p.strip()])
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    classes_module = args.out.with_name("oracle_classes.py")
    write_classes_module(catalogue.unpack(data["entries"]), classes_module)
    print(
        f"{data['modules_imported']} modules imported ({len(data['modules_failed'])} failed) in {data['import_seconds']} s; "
        f"{data['registrable']} registrable {data['by_form']}; skipped {data['skipped']}; "
        f"aliases {data['aliases_not_listed']} -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
