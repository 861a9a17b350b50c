"""A class replaced by an identical subclass: upstream's ``super(Name, self)`` calls its own method again.

Run: python -m fl_patch tests/support/oracle/repros/r02_super_name_self.py   (exit 1: the defect is there)
"""

import sys

import fl_patch

T = "megatron.core.optimizer.grad_scaler.DynamicGradScaler"


def __getattr__(name: str) -> type:  # the impl: a subclass of the original that adds nothing
    if name != "Same":
        raise AttributeError(name)
    base = fl_patch.original(T)
    return type(base)(base.__name__, (base,), {"__slots__": ()})


if __name__ == "__main__":
    fl_patch.register(T, "r02_super_name_self:Same")
    from megatron.core.optimizer.grad_scaler import DynamicGradScaler

    try:
        # grad_scaler.py: super(DynamicGradScaler, self).__init__(initial_scale): the name is the installed
        # class, whose MRO continues with the impl, whose __init__ is DynamicGradScaler.__init__ again
        DynamicGradScaler(2.0**16, 1.0, 2.0, 0.5, 1000, 2)
    except TypeError as exc:
        print(f"DEFECT: DynamicGradScaler(...): TypeError: {exc}")
        sys.exit(1)
    print("OK: DynamicGradScaler builds")
