"""A replaced class puts two classes into upstream's ``__bases__`` walk: megatron reads each one's source.

Run: python -m fl_patch tests/support/oracle/repros/r05_bases_walk_source.py   (exit 1: the defect is there)
"""

import sys
import types

import fl_patch

T = "megatron.core.transformer.transformer_config.TransformerConfig"


def __getattr__(name: str) -> type:  # the impl: a subclass that adds nothing, made at run time (a factory)
    if name != "Same":
        raise AttributeError(name)
    base = fl_patch.original(T)
    return types.new_class(base.__name__, (base,), exec_body=lambda ns: ns.update(__slots__=()))


if __name__ == "__main__":
    fl_patch.register(T, "r05_bases_walk_source:Same")
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.training.argument_utils import ArgumentGroupFactory

    chain = [f"{c.__module__}.{c.__qualname__}" for c in TransformerConfig.__mro__[:4]]
    try:
        # what pretrain_gpt.py's argument parser does (arguments.py _add_network_size_args): the docstrings of
        # every field, read from inspect.getsource of each class along __bases__[0]
        ArgumentGroupFactory(TransformerConfig)
    except (OSError, TypeError) as exc:
        print(f"DEFECT: ArgumentGroupFactory(TransformerConfig): {type(exc).__name__}: {exc}")
        print(f"        the walk: {' -> '.join(chain)}")
        sys.exit(1)
    print("OK: ArgumentGroupFactory(TransformerConfig) builds")
