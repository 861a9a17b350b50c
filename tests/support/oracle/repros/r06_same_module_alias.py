"""A name the target's own module binds to the same object (an alias) keeps the original after the patch.

Run: python -m fl_patch tests/support/oracle/repros/r06_same_module_alias.py   (exit 1: the defect is there)
"""

import sys
import types

import fl_patch

# finalize_model_grads.py line 491: _allreduce_layernorm_grads = _allreduce_non_tensor_model_parallel_grads
T = "megatron.core.distributed.finalize_model_grads._allreduce_non_tensor_model_parallel_grads"
ALIAS = "_allreduce_layernorm_grads"


def __getattr__(name: str) -> types.FunctionType:  # the impl: an identical copy of the function
    if name != "same":
        raise AttributeError(name)
    f = fl_patch.original(T)
    return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)


if __name__ == "__main__":
    fl_patch.register(T, "r06_same_module_alias:same")
    import importlib

    module = importlib.import_module("megatron.core.distributed.finalize_model_grads")

    patched = getattr(module, T.rsplit(".", 1)[1])
    alias = getattr(module, ALIAS)
    if patched is not fl_patch.original(T) and alias is fl_patch.original(T):
        print(f"DEFECT: {module.__name__}.{ALIAS} is still the original (a call through it runs upstream),")
        print(f"        while {T.rsplit('.', 1)[1]} is the impl")
        sys.exit(1)
    print(f"OK: {ALIAS} is {'the impl' if alias is patched else alias!r}")
