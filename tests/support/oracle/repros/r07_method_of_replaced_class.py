"""A method target of a class that is replaced too lands on fl_patch's stand-in: subclasses keep the original.

Run: python -m fl_patch tests/support/oracle/repros/r07_method_of_replaced_class.py   (exit 1: the defect is there)
"""

import sys
import types

import fl_patch

CLS = "megatron.core.datasets.gpt_dataset.GPTDataset"
METHOD = "megatron.core.datasets.gpt_dataset.GPTDataset._get_num_epochs"


def __getattr__(name: str) -> object:  # the impls: an identical subclass, an identical copy of the method
    if name == "Same":
        base = fl_patch.original(CLS)
        return type(base)(base.__name__, (base,), {"__slots__": ()})
    if name == "same":
        f = fl_patch.original(METHOD)
        return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    raise AttributeError(name)


if __name__ == "__main__":
    fl_patch.register(CLS, "r07_method_of_replaced_class:Same")
    fl_patch.register(METHOD, "r07_method_of_replaced_class:same")
    from megatron.core.datasets import gpt_dataset

    # MockGPTDataset(GPTDataset) is defined in the same module body, so it subclasses the upstream class
    seen = gpt_dataset.MockGPTDataset._get_num_epochs
    if seen is fl_patch.original(METHOD):
        where = [c.__qualname__ for c in gpt_dataset.GPTDataset.__mro__ if "_get_num_epochs" in vars(c)]
        print(
            "DEFECT: MockGPTDataset._get_num_epochs is the original: the method patch went to",
            where[0],
            "(fl_patch's stand-in), not to the upstream GPTDataset that MockGPTDataset inherits from",
        )
        sys.exit(1)
    print("OK: MockGPTDataset._get_num_epochs is the impl")
