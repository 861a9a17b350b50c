"""``gradient_accumulation_fusion=True`` without Apex: the weight gradient added into ``main_grad`` by one GEMM.

Why: megatron-core's linear layers (``tensor_parallel/layers.py``,
``LinearWithGradAccumulationAndAsyncCommunication.backward``) can skip the weight gradient as a tensor
and accumulate ``grad_output^T @ input`` straight into the fp32 ``weight.main_grad`` that megatron's
DDP keeps, through Apex's CUDA extension ``fused_weight_gradient_mlp_cuda``. Without Apex the module
binds ``_grad_accum_fusion_available = False`` and ``ColumnParallelLinear`` refuses the config
("gradient_accumulation_fusion set to True but the custom CUDA extension ... is not found"), and
Megatron-LM's recipes turn the fusion on by default (``--no-gradient-accumulation-fusion`` turns it off).
Without the fusion, each weight's gradient is written in bf16, then DDP's hook adds it into
``main_grad`` (one more pass over every weight per micro-batch: 4.9 ms of the 1.31B model's step on
an H200, ``docs/gpu_runs_h200/profile_llama131_mbs1.txt``), and the product is rounded to bf16
before it is summed.

How: this module stands in for the extension (``layers.fused_weight_gradient_mlp_cuda``, created where
absent, and ``layers._grad_accum_fusion_available = True``) with its two functions and their argument
order (``input, grad_output, main_grad``):
- ``wgrad_gemm_accum_fp32``: on CUDA with bf16/fp16 operands, ``torch.addmm(main_grad, g^T, x,
  out_dtype=float32, out=main_grad)``: cuBLAS multiplies in the operands' precision, accumulates in
  fp32 and adds into ``main_grad`` in place (beta = 1), in one call, as Apex's kernel does. That form
  is trusted only after a one-time check against fp32 arithmetic (outside a CUDA graph capture:
  until then, and if the check fails, ``main_grad.add_(mm(g^T, x, out_dtype=float32))``, still with
  no bf16 rounding of the product; said once). On the CPU (and for fp32 operands), ``main_grad.addmm_``
  of the operands in fp32.
- ``wgrad_gemm_accum_fp16``: ``main_grad`` in bf16/fp16: ``main_grad.addmm_(g^T, x)``.
Megatron's own code does the rest unchanged: it marks ``weight.grad_added_to_main_grad`` and hands
autograd an empty gradient that DDP then ignores.

Upstream reference: megatron-core 0.19.2 ``megatron/core/tensor_parallel/layers.py`` (the
``fused_weight_gradient_mlp_cuda`` import, ``LinearWithGradAccumulationAndAsyncCommunication.backward``,
the check in ``ColumnParallelLinear.__init__`` / ``RowParallelLinear.__init__``); Apex's
``csrc/megatron/fused_weight_gradient_dense.cpp``.
When to drop: where Apex is installed (nothing here is registered then), or when megatron-core
accumulates the weight gradient with torch's ``out_dtype`` itself.
"""

from __future__ import annotations

import logging
import threading

import torch

__all__ = ["AVAILABLE", "wgrad_gemm_accum_fp16", "wgrad_gemm_accum_fp32"]

AVAILABLE = True
"""``layers._grad_accum_fusion_available``: the functions below are there."""

LOG = logging.getLogger("fl_patch")

# None: not checked yet; True/False: cuBLAS's in-place mixed-precision addmm was checked (once per process).
_in_place_trusted: bool | None = None
_check_lock = threading.Lock()


def _as_matrix(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1])


def _in_place_addmm_problem(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why ``addmm(C, A, B, out_dtype=float32, out=C)`` cannot be trusted to add ``A @ B`` into ``C`` in place in
    fp32 here (None: it can)."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(96, 40, device=device, dtype=dtype, generator=gen)
    b = torch.randn(96, 72, device=device, dtype=dtype, generator=gen)
    c = torch.randn(40, 72, device=device, dtype=torch.float32, generator=gen)
    expected = c + a.t().float() @ b.float()
    pointer = c.data_ptr()
    try:
        result = torch.addmm(c, a.t(), b, out_dtype=torch.float32, out=c)
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        first = str(exc).split(". ")[0]  # torch's dispatcher error goes on with a page of backend lists
        return f"torch.addmm(out_dtype=float32, out=main_grad) raised {type(exc).__name__}: {first}"
    if result.data_ptr() != pointer or not torch.allclose(c, expected, rtol=1e-4, atol=1e-3):
        return "cuBLAS's in-place fp32 addmm gave other sums than fp32 arithmetic"
    return None


def _trusted(device: torch.device, dtype: torch.dtype) -> bool:
    global _in_place_trusted
    if _in_place_trusted is None:
        if torch.cuda.is_current_stream_capturing():
            return False  # a check cannot synchronise inside a capture; the safe form is used until one runs
        with _check_lock:
            if _in_place_trusted is None:
                problem = _in_place_addmm_problem(device, dtype)
                _in_place_trusted = problem is None
                if problem is not None:  # said once: the check runs once per process
                    LOG.warning(
                        "fl_patch: gradient accumulation fusion adds an fp32 product into main_grad in two kernels: %s",
                        problem,
                    )
    return _in_place_trusted


def wgrad_gemm_accum_fp32(total_input: torch.Tensor, grad_output: torch.Tensor, main_grad: torch.Tensor) -> None:
    """``main_grad += grad_output^T @ total_input`` with an fp32 ``main_grad``, no low-precision rounding of the product."""
    x, g = _as_matrix(total_input), _as_matrix(grad_output)
    if main_grad.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and g.dtype == x.dtype:
        if _trusted(main_grad.device, x.dtype):
            torch.addmm(main_grad, g.t(), x, out_dtype=torch.float32, out=main_grad)
        else:
            main_grad.add_(torch.mm(g.t(), x, out_dtype=torch.float32))
        return
    main_grad.addmm_(g.t().to(main_grad.dtype), x.to(main_grad.dtype))


def wgrad_gemm_accum_fp16(total_input: torch.Tensor, grad_output: torch.Tensor, main_grad: torch.Tensor) -> None:
    """``main_grad += grad_output^T @ total_input`` with a bf16/fp16 ``main_grad``."""
    x, g = _as_matrix(total_input), _as_matrix(grad_output)
    main_grad.addmm_(g.t().to(main_grad.dtype), x.to(main_grad.dtype))
