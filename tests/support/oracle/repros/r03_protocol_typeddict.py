"""An identical subclass of a typing.Protocol (not runtime_checkable) is applied; a TypedDict is refused, naming why.

Run: python -m fl_patch tests/support/oracle/repros/r03_protocol_typeddict.py   (exit 1: the defect is there)

Fixed on the new engine: ``issubclass(impl, Protocol)`` raised; the engine reads the MRO
(``engine/applier.py`` ``_stale_subclass``, ``core/classes.py`` ``_class_level_members``). A TypedDict
has no class at run time (a "subclass" has bases ``(dict,)``, instances are plain dicts): refusing it is
right, and the refusal must say so (``core/kinds.py`` ``kind_problem``), not "does not subclass".
"""

import sys
import types

import fl_patch

TARGETS = {
    "Proto": "megatron.core.transformer.mlp.LinearFc1Builder",  # class LinearFc1Builder(Protocol)
    "Typed": "megatron.core.optimizer_param_scheduler.ParamGroupOverride",  # class ParamGroupOverride(TypedDict)
}


def __getattr__(name: str) -> type:  # the impl: a subclass of the original that adds nothing
    if name not in TARGETS:
        raise AttributeError(name)
    base = fl_patch.original(TARGETS[name])
    return types.new_class(base.__name__, (base,))


if __name__ == "__main__":
    for name, target in TARGETS.items():
        fl_patch.register(target, f"r03_protocol_typeddict:{name}")
    import megatron.core.optimizer_param_scheduler
    import megatron.core.transformer.mlp  # noqa: F401

    records = {r.target: r for r in fl_patch.report() if r.target in TARGETS.values()}
    proto, typed = records[TARGETS["Proto"]], records[TARGETS["Typed"]]
    bad = []
    if proto.status.value != "applied":
        bad.append(f"{proto.target}: {proto.status.value}: {proto.detail}")
    if typed.status.value == "applied" or "TypedDict" not in (typed.detail or ""):
        bad.append(f"{typed.target}: {typed.status.value}: {typed.detail} (expected: refused, naming the TypedDict)")
    for line in bad:
        print("DEFECT:", line)
    if not bad:
        print(f"OK: the Protocol subclass is applied; the TypedDict is refused: {typed.detail}")
    sys.exit(1 if bad else 0)
