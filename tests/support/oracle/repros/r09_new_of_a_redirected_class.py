"""A class and its own ``__new__`` both registered: the ``__new__`` patch is refused (the class's redirect is there).

Run: python -m fl_patch tests/support/oracle/repros/r09_new_of_a_redirected_class.py   (exit 1: the defect is there)

The new engine redirects instantiation by setting ``Name.__new__`` to its own function
(``core/classes.py`` ``redirect``/``_redirecting_new``, which calls the class's previous ``__new__``).
A method target ``Name.__new__`` registered too then resolves to that function
(``core/resolve.py``, ``vars(Name)["__new__"]``), whose signature is ``(cls, *args, **kwargs)``:
``core/kinds.py`` ``decide`` refuses the impl ("the target takes *args; the impl does not"), and
upstream's ``__new__`` keeps running (seen in the demo); or the ``__new__`` patch is
installed at ``vars(Name)["__new__"]`` over the redirect: both report ``applied`` and ``Name(...)`` builds
the upstream class again (the class patch silently lost). Registered in either order, this file sees
the second. 6 targets in the demo's modules (``WrappedTorchNorm``, ``TENorm``, ``StragglerDetector``,
``GTPShardedParam``, two checkpointable tensor classes).
"""

import sys
import types

import fl_patch

CLS = (
    "megatron.core.dist_checkpointing.strategies.checkpointable.LocalShardsContainer"  # def __new__(cls, local_shards)
)
NEW = CLS + ".__new__"


def __getattr__(name: str) -> object:  # the impls: an identical subclass, an identical copy of __new__
    if name == "Same":
        base = fl_patch.original(CLS)
        return types.new_class(base.__name__, (base,), exec_body=lambda ns: ns.update(__slots__=()))
    if name == "same_new":
        f = fl_patch.original(NEW)
        return staticmethod(types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__))
    raise AttributeError(name)


if __name__ == "__main__":
    fl_patch.register(CLS, "r09_new_of_a_redirected_class:Same")
    fl_patch.register(NEW, "r09_new_of_a_redirected_class:same_new")
    import torch
    from megatron.core.dist_checkpointing.strategies import checkpointable

    bad = [f"{r.target}: {r.status.value}: {r.detail}" for r in fl_patch.report() if r.target in (CLS, NEW)]
    bad = [line for line in bad if ": applied" not in line]
    # What LocalShardsContainer(...) builds (its __init__ needs checkpointable shards: __new__ alone is enough)
    upstream = checkpointable.LocalShardsContainer
    built = type(upstream.__new__(upstream, [torch.ones(2)]))
    if built is upstream:
        bad.append(
            f"{CLS}(...) builds the upstream class, not the impl: the class patch is lost though reported applied"
        )
    for line in bad:
        print("DEFECT:", line[:400])
    if not bad:
        print("OK: the class and its __new__ are both applied")
    sys.exit(1 if bad else 0)
