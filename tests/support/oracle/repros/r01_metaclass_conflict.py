"""A class replaced by an identical subclass breaks a later class that mixes it with an ABC: metaclass conflict.

Run: python -m fl_patch tests/support/oracle/repros/r01_metaclass_conflict.py   (exit 1: the defect is there)
"""

import sys

import fl_patch

T = "megatron.core.transformer.module.GraphableMegatronModule"  # metaclass type; BaseTransformerLayer is an ABC


def __getattr__(name: str) -> type:  # the impl: a subclass of the original that adds nothing
    if name != "Same":
        raise AttributeError(name)
    base = fl_patch.original(T)
    return type(base)(base.__name__, (base,), {"__slots__": ()})


if __name__ == "__main__":
    fl_patch.register(T, "r01_metaclass_conflict:Same")
    try:
        # transformer_layer.py: class TransformerLayer(GraphableMegatronModule, BaseTransformerLayer)
        import megatron.core.transformer.transformer_layer  # noqa: F401
    except TypeError as exc:
        print(f"DEFECT: import megatron.core.transformer.transformer_layer: TypeError: {exc}")
        sys.exit(1)
    print("OK: transformer_layer imports with GraphableMegatronModule replaced")
