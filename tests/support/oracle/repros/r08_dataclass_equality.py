"""A replaced dataclass: its instances never equal the upstream class's (``__eq__`` compares ``__class__``).

Run: python -m fl_patch tests/support/oracle/repros/r08_dataclass_equality.py   (exit 1: the defect is there)
"""

import sys

import fl_patch

T = "megatron.core.optimizer.optimizer_config.OptimizerConfig"


def __getattr__(name: str) -> type:  # the impl: a subclass of the original that adds nothing
    if name != "Same":
        raise AttributeError(name)
    base = fl_patch.original(T)
    return type(base)(base.__name__, (base,), {"__slots__": ()})


if __name__ == "__main__":
    fl_patch.register(T, "r08_dataclass_equality:Same")
    # optimizer_config.py: AdamOptimizerConfig = OptimizerConfig (a deprecated alias: it keeps the upstream class)
    from megatron.core.optimizer.optimizer_config import AdamOptimizerConfig, OptimizerConfig

    if OptimizerConfig(lr=1e-3) != AdamOptimizerConfig(lr=1e-3):
        print("DEFECT: OptimizerConfig(lr=1e-3) != AdamOptimizerConfig(lr=1e-3) (upstream: equal, one class);")
        print("        the dataclass __eq__ requires other.__class__ is self.__class__")
        sys.exit(1)
    print("OK: the two configs are equal")
