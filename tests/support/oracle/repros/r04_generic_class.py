"""A generic class replaced by a generic subclass can no longer be subscripted: "is not a generic class".

Run: python -m fl_patch tests/support/oracle/repros/r04_generic_class.py   (exit 1: the defect is there)
"""

import sys
import types

import fl_patch

T = "megatron.training.models.base.ModelBuilder"  # class ModelBuilder(ABC, Generic[ModelT, BuildConfigT])


def __getattr__(name: str) -> type:  # the impl: a subclass with the same type parameters, adding nothing
    if name != "Same":
        raise AttributeError(name)
    base = fl_patch.original(T)
    return types.new_class(base.__name__, (base[base.__parameters__],))


if __name__ == "__main__":
    fl_patch.register(T, "r04_generic_class:Same")
    impl = sys.modules.setdefault("r04_generic_class", __import__("r04_generic_class"))
    try:
        # hybrid.py: class HybridModelBuilder(ModelBuilder[HybridModel, HybridModelConfig])
        import megatron.training.models.hybrid  # noqa: F401
    except TypeError as exc:
        print(f"DEFECT: import megatron.training.models.hybrid: TypeError: {exc}")
        print(f"        (the impl's parameters: {impl.Same.__parameters__})")
        sys.exit(1)
    print("OK: megatron.training.models.hybrid imports with ModelBuilder replaced")
