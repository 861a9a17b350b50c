"""The FlagGems GPU pack: megatron-core's local-spec hot ops on Triton kernels, forward and backward.

Chosen with ``MG_FL_PREFER=flaggems``. The vendor list is the user's entries, then
the detected platform, then ``default`` (``src/fl_patch/core/vendors.py``), so on a GPU
machine ``MG_FL_PREFER=flaggems`` means ``flaggems, cuda, default``: every target
this pack registers runs the pack's impl; a target it does not register runs a
``cuda`` impl if some pack registers one, else upstream. Without ``MG_FL_PREFER``
(or on a CPU machine, where the platform is ``cpu``) the pack is inert: its
registrations cost a few dict entries and import nothing.

What it replaces (``registry.py`` lists the targets; each impl module's docstring
says why, how, the upstream code it replaces and when to drop it):

=================  ==========================================================  =============
op                 megatron-core 0.19.2 target                                   module
=================  ==========================================================  =============
RMSNorm/LayerNorm  ``transformer.torch_norm.WrappedTorchNorm``                   ``norm``
SwiGLU             ``transformer.mlp.MLP.forward``,                              ``mlp``
                   ``fusions.fused_bias_swiglu.bias_swiglu_impl``
RoPE               ``models.common.embeddings.rope_utils.apply_rotary_pos_emb``  ``rope``
core attention     ``transformer.dot_product_attention.DotProductAttention       ``attention``,
                   .forward``                                                   ``sdpa``
masked softmax     ``fusions.fused_softmax.FusedScaleMaskSoftmax.forward``       ``softmax``
cross entropy      ``tensor_parallel.cross_entropy.vocab_parallel_cross_entropy``,  ``cross_entropy``
                   ``fusions.fused_cross_entropy.fused_vocab_parallel_cross_entropy``
optimizer step     ``optimizer.USING_PYTORCH_OPTIMIZER``, ``optimizer.Adam``,     ``optimizer``
(no Apex/TE)       ``utils.local_multi_tensor_l2_norm``, ``..._scale``
TE layer spec      the TE names megatron binds (``cpu/te_registry.py``) and the    ``te``
(no TE)            TE-compatible modules' ``norm``, ``attention``,
                   ``grouped_matmul``; ``fused_bias_swiglu.weighted_bias_swiglu_impl``
=================  ==========================================================  =============

GEMMs stay on cuBLAS through torch: no Triton GEMM (FlagGems' ``mm`` included) was
measured faster on the model's shapes (docs/gpu_pack.md, ``bench/gpu_ops.py``). Under fp8
(``fp8.py``: megatron's fp8 recipes without TE) they are cuBLASLt's fp8 GEMMs: ``torch._scaled_mm``,
and for a weight gradient added into megatron's ``main_grad`` cuBLASLt's own call, which adds in
its epilogue (``cublaslt.py``, through ctypes; checked once per device in ``fp8_quant.py``).

Kernels: ``kernels/`` holds this project's Triton kernels; ``gems.py`` wraps
FlagGems 5.0.2's RMSNorm, LayerNorm and SwiGLU (working around their known
defects), and ``ops.py`` picks one per op (``_runtime.DEFAULT_BACKEND``, overridden
by ``FL_GEMS_BACKEND="rms_norm=flaggems,..."``). Measured on an H200, this project's
kernel was correct and faster than FlagGems' for every op, so it is the default, except
core attention, where cuDNN's fused attention through torch SDPA (``sdpa.py``) was faster
than this project's Triton kernel and is the default (the Triton kernel takes what cuDNN
does not); FlagGems' attention (always-causal backward, a crash at the training shape) and
cross entropy (bf16 loss, off-vocabulary semantics, a crash on strided rows) are not
offered; FlagGems has no training RoPE or masked softmax (docs/gpu_pack.md).

Fallbacks: a call an impl does not cover (a dtype, a shape, tensor parallelism
where it matters, input not on CUDA, triton missing) runs upstream's code
(``fl_patch.original``); each (op, reason) is logged once at WARNING on the
``fl_patch.flaggems`` logger and counted (``_runtime.fallback_summary()``).
``TRITON_INTERPRET=1`` lets the kernels run on CPU tensors (tests).
"""
