"""Fused kernels megatron-core would choose even when they cannot run on this machine, and its JIT fusions run as written."""

from __future__ import annotations

from typing import Any

import torch

from fl_patch.impls._compat import warn_if_unverified

__all__ = ["IndicesToMultihot", "eager_jit_fuser", "fused_indices_to_multihot", "fused_softmax_kernel_available"]

warn_if_unverified()


def eager_jit_fuser(model: Any = None, **kwargs: Any) -> Any:
    """Patch for ``megatron.core.jit.jit_fuser``: the decorated function, as written.

    Why: ``jit_fuser`` is ``torch.compile`` on torch >= 2.2 (``megatron/core/jit.py``); it decorates the
    fused bias-GeLU/SwiGLU/GeGLU, bias-dropout-add and other elementwise functions. megatron.training
    turns the bias fusions on by default and compiles them before the first step
    (``initialize._warmup_jit_function``), so on a CPU every training process ran dynamo and inductor,
    whose CPU backend builds C++ with the system compiler at the first call. Measured on this project's
    2-core machine (``bench/startup.py --training``: a one-rank run of a small GPT, 2 iterations, to its end;
    medians of 5), 6.7 s of CPU with the functions as written, 10.8 s compiled with a warm inductor cache,
    21.2 s with an empty one (a new machine, a CI run); the steps were not faster compiled (29-30 ms an
    iteration as written, 31-33 ms compiled). megatron.training's own ``--disable-jit-fuser`` does not help:
    it calls ``disable_jit_fuser()`` in ``set_global_variables``, after the fusion modules were imported and
    their functions decorated (measured: the run still imports inductor and costs as much).
    How: the decorator megatron reads when its fusions are imported returns the function unchanged, as
    upstream's own ``disable_jit_fuser()`` (``noop_decorator``) does: the same Python code, run eagerly, the
    same maths. Dropout inside a fused function then draws from torch's generator as the unfused path does
    (inductor draws its own numbers, so a compiled and an eager run differ in their dropout masks).
    ``FL_PATCH_DISABLE=megatron.core.jit.jit_fuser`` keeps upstream's ``torch.compile`` (compiled at the
    first call: ``lazy_compile``). The decorator form with arguments (``@jit_fuser(...)``) is taken too.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/jit.py``, ``megatron/training/initialize.py``.
    Drop when: megatron chooses the fuser by device, or inductor's CPU build costs little at start.
    """
    if model is None:  # @jit_fuser(...): the decorator it gives
        return eager_jit_fuser
    return model


def fused_softmax_kernel_available(self: Any, mask: Any, b: int, np: int, sq: int, sk: int) -> bool:
    """Patch for ``fusions.fused_softmax.FusedScaleMaskSoftmax.is_kernel_available``.

    Why: upstream (``fused_softmax.py``, ``FusedScaleMaskSoftmax.is_kernel_available``)
    decides from the shapes and ``masked_softmax_fusion`` (True by default in
    ``TransformerConfig``) alone; for fp16/bf16 attention with suitable shapes it calls
    ``get_batch_per_block``, which does ``import scaled_masked_softmax_cuda`` (a CUDA
    extension): ``ModuleNotFoundError`` in the first attention forward pass.
    How: the fused kernel never exists on a CPU, so this answers False and
    ``forward_torch_softmax`` (upstream's own fallback, same maths) runs.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/fusions/fused_softmax.py``.
    Drop when: upstream checks that the extension imports (or the tensor's device)
    before choosing the kernel.
    """
    return False


class IndicesToMultihot(torch.autograd.Function):
    """Top-k expert indices to a multihot routing map and per-expert probabilities, and the gradient back."""

    @staticmethod
    def forward(
        ctx: Any, indices: torch.Tensor, probs_indices: torch.Tensor, num_of_local_experts: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if indices.shape != probs_indices.shape or indices.dim() != 2:
            raise ValueError(
                f"fused_indices_to_multihot: indices {tuple(indices.shape)} and probs_indices "
                f"{tuple(probs_indices.shape)} must be the same [tokens, topk] shape"
            )
        experts = int(num_of_local_experts)
        # An entry routes when it names a local expert; -1 (megatron's "no expert") and any index outside
        # [0, experts) write nothing: those go to one spare column, dropped after the scatter (and read as 0
        # by the backward).
        valid = (indices >= 0) & (indices < experts)
        column = torch.where(valid, indices, experts).long()
        tokens = indices.shape[0]
        multihot = torch.zeros(tokens, experts + 1, dtype=torch.bool, device=indices.device)
        multihot.scatter_(1, column, True)
        probs = torch.zeros(tokens, experts + 1, dtype=probs_indices.dtype, device=probs_indices.device)
        probs.scatter_(1, column, probs_indices)
        ctx.save_for_backward(column)
        return multihot[:, :experts].contiguous(), probs[:, :experts].contiguous()

    @staticmethod
    def backward(
        ctx: Any, grad_multihot: torch.Tensor | None, grad_probs: torch.Tensor | None
    ) -> tuple[None, torch.Tensor | None, None]:
        (column,) = ctx.saved_tensors
        if grad_probs is None:
            return None, None, None
        padded = torch.nn.functional.pad(grad_probs, (0, 1))  # the spare column: gradient 0
        return None, padded.gather(1, column), None


def fused_indices_to_multihot(
    indices: torch.Tensor, probs_indices: torch.Tensor, num_of_local_experts: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Patch for ``fusions.fused_indices_converter.fused_indices_to_multihot``.

    Why: upstream's function launches a Triton kernel (one program per token, ``device="cuda"``
    buffers). Without Triton its fallback cannot run at all: megatron-core 0.19.2 binds
    ``triton.jit = null_decorator``, and ``null_decorator`` is itself wrapped in
    ``@contextmanager``, so every kernel becomes a ``_GeneratorContextManager`` and the first call
    raises ``TypeError: '_GeneratorContextManager' object is not subscriptable``. The flex token
    dispatcher and Megatron-LM's own tests of the converter reach it.
    How: the same mapping in torch, on whatever device the tensors are: a row's valid entries
    (an index in ``[0, num_of_local_experts)``; -1 means none) set ``True`` and their probability in
    the expert's column, everything else ``False``/0; the backward gathers each entry's gradient
    from its expert's column (0 for an entry that routed nowhere), as the kernel's position map does.
    Outputs: ``bool`` multihot and probabilities in ``probs_indices``'s dtype, ``[tokens, experts]``.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/fusions/fused_indices_converter.py``
    (``IndicesToMultihot``, ``_indices_to_multihot_kernel``, ``_multihot_to_indices_kernel``),
    ``megatron/core/utils.py`` (``null_decorator``).
    Drop when: this machine has Triton and a GPU, or upstream's fallback runs without Triton.
    """
    return IndicesToMultihot.apply(indices, probs_indices, num_of_local_experts)
