"""Where the upstream object survives once its target is patched: an audit, run in a patched process.

Run under fl_patch with the oracle registry (``bench/oracle.py --part survivors`` does)::

    FL_PATCH_REGISTRY=oracle_registry python -m fl_patch tests/support/oracle/oracle_survivors.py OUT.json MODULE...

It imports the modules named, then, for every oracle registration reported ``applied``, asks the
garbage collector what still refers to the original (``fl_patch.original(target)``). A reference
from a module's globals is a name the engine did not rebind; from a function's defaults, a
closure cell, a class's ``__dict__``, a container or an object's ``__dict__`` (a ``ModuleSpec``,
a dataclass field, a registry table) it is a place upstream keeps the original, where a call
or an ``is``/``==`` check bypasses the patch (README, "Known limits"). Identical copies cannot
show those as a different result; this lists them. References that are the patch's own (the
impl's ``__wrapped__``, a copy subclassing its original, fl_patch's records, the class's own
methods and ``__mro__``) are not counted.
"""

from __future__ import annotations

import gc
import importlib
import json
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

import fl_patch

_SKIP = (types.GetSetDescriptorType, types.MemberDescriptorType, type, types.FrameType)
_OURS = ("fl_patch", "oracle_")


def _ours(obj: object) -> bool:
    return (type(obj).__module__ or "").startswith(_OURS)


class Owners:
    """Who holds each dict, cell, tuple and descriptor: built in one pass over the heap, so that each
    reference found is placed without another scan (``gc.get_referrers`` is a scan of its own)."""

    def __init__(self) -> None:
        self.dicts: dict[int, object] = {}
        self.cells: dict[int, types.FunctionType] = {}
        self.defaults: dict[int, types.FunctionType] = {}
        self.descriptors: dict[int, dict[str, object]] = {}
        self.parents: dict[int, dict[object, object]] = {}  # a dict held as a value of another dict
        rank: dict[int, int] = {}
        for obj in gc.get_objects():
            if isinstance(obj, types.FunctionType):
                for cell in obj.__closure__ or ():
                    self.cells.setdefault(id(cell), obj)
                if obj.__defaults__:
                    self.defaults[id(obj.__defaults__)] = obj
            if isinstance(obj, (dict, list, tuple, set, frozenset)):
                level = 9  # a container is never an owner: what holds it is
            elif isinstance(obj, types.ModuleType):
                level = 0
            elif isinstance(obj, type):
                level = 1
            elif isinstance(obj, types.FunctionType):
                level = 2
            else:
                level = 3  # an object: its __dict__, or a dict in one of its slots
            for ref in gc.get_referents(obj) if level < 9 else ():
                if type(ref) is dict and level < rank.get(id(ref), 9):
                    self.dicts[id(ref)], rank[id(ref)] = obj, level
            if type(obj) is dict:
                for value in obj.values():
                    if isinstance(value, (staticmethod, classmethod, property)):
                        self.descriptors[id(value)] = obj
                    elif type(value) is dict:
                        self.parents.setdefault(id(value), obj)

    def owner(self, mapping: dict[object, object]) -> tuple[object | None, bool]:
        """The object whose attribute ``mapping`` is (directly: True), or that holds it in its attribute dicts."""
        for depth in range(4):
            holder = self.dicts.get(id(mapping))
            if holder is not None:
                return holder, depth == 0
            parent = self.parents.get(id(mapping))
            if parent is None:
                return None, False
            mapping = parent
        return None, False


def _name_of(mapping: dict[str, object], oid: int) -> str:
    return next((str(k) for k, v in mapping.items() if id(v) == oid), "?")


def _place(referrer: object, oid: int, target: str, owners: Owners) -> tuple[str, str] | None:
    """(kind of place, where) for a reference to the original ``oid``; None for the patch's own references,
    the original's own structure (its methods' ``__class__`` cell, ``__dict__``/``__weakref__`` descriptors,
    subclasses: counted apart), annotations, and fl_patch's or the oracle's own objects."""
    if isinstance(referrer, _SKIP) or _ours(referrer):
        return None
    if isinstance(referrer, (staticmethod, classmethod, property)):
        holder_dict = owners.descriptors.get(id(referrer))
        return None if holder_dict is None else _place(holder_dict, id(referrer), target, owners)
    if isinstance(referrer, dict):
        if "__wrapped__" in referrer and id(referrer["__wrapped__"]) == oid:
            return None  # an impl marked with its original
        if "__fl_patch_original__" in referrer:
            return None  # a stand-in's own namespace
        name = _name_of(referrer, oid)
        holder, direct = owners.owner(referrer)
        if holder is not None and (_ours(holder) or isinstance(holder, Owners)):
            return None
        if not direct and holder is not None:
            where = holder.__name__ if isinstance(holder, (types.ModuleType, type)) else type(holder).__qualname__
            return "a table (a dict inside a global or an attribute)", f"{where}: key {name!r}"
        if isinstance(holder, types.ModuleType):
            return "module global (a name the engine did not rebind)", f"{holder.__name__}.{name}"
        if isinstance(holder, type):
            return "class attribute", f"{holder.__module__}.{holder.__qualname__}.{name}"
        if isinstance(holder, types.FunctionType):
            if holder.__kwdefaults__ is referrer:
                return "default argument", f"{holder.__module__}.{holder.__qualname__}({name}=...)"
            return None  # its __annotations__ (read as a type) or its __dict__ (__wrapped__ of a decorator)
        if holder is not None:
            return "instance attribute", f"{type(holder).__module__}.{type(holder).__qualname__}.{name}"
        if name == "?":
            return "dict key", f"a dict of {len(referrer)} entries"
        if name == str(oid):
            return None  # a map from id() to the object: fl_patch's own bookkeeping
        return "dict value", f"key {name!r}"
    if isinstance(referrer, types.CellType):
        fn = owners.cells.get(id(referrer))
        if fn is None or fn.__module__.startswith(_OURS):
            return None
        if fn.__qualname__.split(".")[0] == target.rsplit(".", 1)[-1]:
            return None  # the original's own methods (zero-argument super's __class__ cell)
        return "closure", f"{fn.__module__}.{fn.__qualname__}"
    if isinstance(referrer, tuple):
        fn = owners.defaults.get(id(referrer))
        return None if fn is None else ("default argument", f"{fn.__module__}.{fn.__qualname__}")
    if isinstance(referrer, types.MethodType):
        return "bound method", f"{getattr(referrer, '__qualname__', repr(referrer))}"
    if type(referrer).__name__ in ("Parameter", "Signature"):
        return None  # a cached signature's annotation
    if isinstance(referrer, (list, set, frozenset)):
        return type(referrer).__name__, f"{len(referrer)} items"
    if id(type(referrer)) == oid:
        return "an instance made before the patch", f"{type(referrer).__module__}.{type(referrer).__qualname__}"
    return f"inside a {type(referrer).__qualname__}", repr(referrer)[:120]


def audit(modules: list[str]) -> dict[str, Any]:
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001  (a module that cannot import here is not audited)
            continue
    gc.collect()
    applied = [r for r in fl_patch.report() if r.source == "oracle_registry" and r.status.value == "applied"]
    originals: dict[int, str] = {}  # id -> target; no container here holds an original itself
    subclasses_before: list[str] = []
    for record in applied:
        try:
            original = fl_patch.original(record.target)
        except LookupError:
            continue
        originals[id(original)] = record.target
        if isinstance(original, type):
            subclasses_before.extend(
                f"{record.target} <- {s.__module__}.{s.__qualname__}"
                for s in type.__subclasses__(original)
                if not (s.__module__ or "").startswith(_OURS)
            )
        del original
    owners = Owners()
    places: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    for referrer in gc.get_objects():
        for oid in {id(r) for r in gc.get_referents(referrer)} & originals.keys():
            found = _place(referrer, oid, originals[oid], owners)
            if found is None:
                continue
            places[found[0]] += 1
            examples.setdefault(found[0], []).append(f"{originals[oid]}: {found[1]}")
    return {
        "applied": len(applied),
        "places": dict(places.most_common()),
        "examples": {k: sorted(set(v))[:60] for k, v in examples.items()},
        "subclasses_of_the_original_defined_before_the_patch": len(subclasses_before),
        "subclasses_examples": subclasses_before[:40],
    }


def main() -> int:
    out = Path(sys.argv[1])
    out.write_text(json.dumps(audit(sys.argv[2:]), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
