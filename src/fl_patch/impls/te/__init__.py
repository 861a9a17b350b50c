"""The pack ``te``: Transformer Engine's layers in plain torch, where TE is absent (``docs/te_spec.md``).

Shared by the CPU pack and the FlagGems GPU pack, each registering it for its own vendor
(``registry.register_pack``).

- ``registry.py``: what it patches (the TE names megatron-core binds, TransformerBlock's final norm,
  TE's fused MoE functions), and the tables ``tests/impls/test_te.py`` checks against each release.
- ``modules.py``: one class per TE wrapper the TE spec uses, with TE's constructor, forward contract and
  parameter names, built on megatron's tensor-parallel layers; their maths in four functions (``norm``,
  ``attention``, ``grouped_matmul``, ``fp8_layer``) that a pack with kernels replaces.
- ``moe_fusions.py``: TE's fused MoE permutation and router functions (``--moe-permute-fusion``,
  ``--moe-router-fusion``); the row movement in four functions a pack with kernels replaces.
"""
