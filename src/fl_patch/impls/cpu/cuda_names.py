"""torch's CUDA-facing names the CPU stand-ins cover, as data: importing this module imports no torch.

Shared by the CPU pack's views of torch (``torch_view.py``) and the CUDA-on-CPU transfer's registry
(``cuda_on_cpu/registry.py``), which registers one patch per name and must not import torch to do so.
"""

__all__ = ["FACTORY_NAMES", "RNG_NAMES"]

FACTORY_NAMES: tuple[str, ...] = (
    "arange",
    "as_tensor",
    "asarray",
    "empty",
    "empty_like",
    "empty_strided",
    "eye",
    "full",
    "full_like",
    "linspace",
    "logspace",
    "ones",
    "ones_like",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "randperm",
    "scalar_tensor",
    "tensor",
    "tril_indices",
    "triu_indices",
    "zeros",
    "zeros_like",
)
"""Tensor factories of ``torch`` that take a ``device`` keyword; here, so that registering imports no torch
(``cuda_on_cpu`` and the CPU views of ``torch_view`` use this list too)."""

RNG_NAMES: tuple[str, ...] = (
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
)
