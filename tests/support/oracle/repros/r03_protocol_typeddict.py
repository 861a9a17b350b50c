"""An identical subclass of a typing.Protocol (not runtime_checkable) or a TypedDict is refused.

Run: python -m fl_patch tests/support/oracle/repros/r03_protocol_typeddict.py   (exit 1: the defect is there)
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

    bad = [
        f"{r.target}: {r.status.value}: {r.detail}"
        for r in fl_patch.report()
        if r.target in TARGETS.values() and r.status.value != "applied"
    ]
    for line in bad:
        print("DEFECT:", line)
    sys.exit(1 if bad else 0)
