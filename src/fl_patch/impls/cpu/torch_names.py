"""The name ``torch`` in each megatron-core module that assumes CUDA: one patch per module.

Each constant below is a :class:`~fl_patch.impls.cpu.torch_view.CpuTorchView` (the real
torch, with CUDA mapped to the CPU) installed by ``registry.py`` as
``megatron.core.<module>.torch``. They behave identically; each is its own object so
that each patch carries its own documentation (``fl_patch.report()`` names it) and can
be dropped on its own when upstream fixes that module.

Every module here was checked by turning its patch off (``FL_PATCH_DISABLE=<target>``)
with ``examples/train_gpt.py`` (1 process fp16 save+resume, torchrun DP=2 bf16 with
the distributed optimizer and recompute, torchrun TP=2 fp32 save): each one, off,
makes at least one of them fail with ``AssertionError: Torch not compiled with CUDA
enabled``, except where noted. Line numbers are those of megatron-core 0.19.2.
"""

from __future__ import annotations

from typing import Any

from fl_patch.impls.without_te.torch_optimizers import OPTIM

from .torch_view import CpuTorchView

__all__ = [
    "CLIP_GRADS",
    "DISTRIB_OPTIMIZER",
    "FILESYSTEM_ASYNC",
    "GRAD_SCALER",
    "OPTIMIZER",
    "OPTIMIZER_PACKAGE",
    "PARAM_AND_GRAD_BUFFER",
    "ROTARY_POS_EMBEDDING",
    "SCHEDULES",
    "STATE_DICT_SAVER",
    "TENSOR_PARALLEL_LAYERS",
    "TENSOR_PARALLEL_RANDOM",
    "TRANSFORMER_UTILS",
    "UTILS",
    "YARN_ROTARY_POS_EMBEDDING",
]


def _view(doc: str, **options: Any) -> CpuTorchView:
    view = CpuTorchView(**options)
    view.__doc__ = doc
    return view


TENSOR_PARALLEL_RANDOM = _view(
    """Patch for ``megatron.core.tensor_parallel.random.torch``.

    Why: ``model_parallel_cuda_manual_seed`` calls ``torch.cuda.manual_seed(data_parallel_seed)``
    (``random.py`` line 490); ``CudaRNGStatesTracker.add`` calls ``torch.cuda.get_rng_state()``
    and ``torch.cuda.manual_seed(seed)`` (lines 303-306); ``_get_cuda_rng_state`` returns
    ``torch.cuda.random.get_rng_state(device=device)`` (line 118), on every tracker fork and
    in activation recompute. On a CPU-only torch the seeding calls are silently queued for a
    CUDA initialisation that never comes and the state getters raise.
    How: the CPU view's ``torch.cuda`` seeds and reads the CPU default generator, which is
    the generator dropout draws from here. (Setting the state needs a function patch too:
    ``rng.set_cuda_rng_state``.)
    Upstream reference: megatron-core 0.19.2, ``megatron/core/tensor_parallel/random.py``.
    Drop when: upstream seeds and reads RNG state through a device-agnostic API.
    """
)

TENSOR_PARALLEL_LAYERS = _view(
    """Patch for ``megatron.core.tensor_parallel.layers.torch``.

    Why: the linear layers' backward allocates on ``torch.cuda.current_device()``: the dummy weight
    gradient handed to autograd under ``gradient_accumulation_fusion`` (``layers.py`` lines 706-719)
    and the sequence-parallel reduce-scatter buffer (line 647); so do the layers' weights when
    ``use_cpu_initialization`` is off (lines 305, 1000, 1041, 1363, 1403).
    How: the CPU view maps ``torch.cuda.current_device()`` to the CPU.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/tensor_parallel/layers.py``.
    Drop when: upstream allocates on the device of the layer's input.
    """
)

UTILS = _view(
    """Patch for ``megatron.core.utils.torch``.

    Why: ``GlobalMemoryBuffer.get_tensor`` allocates with
    ``device=torch.cuda.current_device()`` (``utils.py`` line 715; used by the
    tensor-parallel layers for their all-gather buffers), and
    ``local_multi_tensor_l2_norm`` (the gradient-norm fallback when neither Apex nor
    Transformer Engine is installed, i.e. always on a CPU) returns
    ``torch.tensor([...], device="cuda")`` (line 1332).
    How: the CPU view maps both devices to ``cpu``.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/utils.py``.
    Drop when: upstream allocates on the device of its inputs.
    """
)

TRANSFORMER_UTILS = _view(
    """Patch for ``megatron.core.transformer.utils.torch``.

    Why: ``get_default_causal_mask`` builds ``torch.ones(sq, sq, device="cuda")`` (line 39;
    the causal mask of every attention layer when the batch carries no mask) and
    ``get_sliding_window_causal_mask`` ``torch.ones(..., device="cuda")`` (line 44).
    How: the CPU view maps ``device="cuda"`` to ``cpu``.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/transformer/utils.py``.
    Drop when: upstream builds the mask on the device of the attention scores.
    """
)

SCHEDULES = _view(
    """Patch for ``megatron.core.pipeline_parallel.schedules.torch``.

    Why: every schedule counts tokens in ``torch.zeros([], dtype=torch.int, device="cuda")``
    (``schedules.py`` lines 749, 1121, 2292): ``get_forward_backward_func()`` fails at its
    first call.
    How: the CPU view maps ``device="cuda"`` to ``cpu``.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/pipeline_parallel/schedules.py``.
    Drop when: upstream allocates the counter on the model's device.
    """
)

PARAM_AND_GRAD_BUFFER = _view(
    """Patch for ``megatron.core.distributed.param_and_grad_buffer.torch``.

    Why: ``_ParamAndGradBuffer.__init__`` allocates the contiguous parameter and gradient
    buffers with ``device=torch.cuda.current_device()`` (``param_and_grad_buffer.py`` lines
    1162-1190), and ``_ParamAndGradBucketGroup.start_grad_sync`` calls
    ``torch.cuda.current_stream()`` (line 632) on every gradient reduction: megatron
    ``DistributedDataParallel`` cannot be built, nor reduce.
    How: the CPU view allocates the buffers on the CPU and hands out a stand-in stream
    (CPU work is ordered and synchronous, so its waits are no-ops).
    Upstream reference: megatron-core 0.19.2, ``megatron/core/distributed/param_and_grad_buffer.py``.
    Drop when: upstream takes the buffers' device from the parameters.
    """
)

YARN_ROTARY_POS_EMBEDDING = _view(
    """Patch for ``megatron.core.models.common.embeddings.yarn_rotary_pos_embedding.torch``.

    Why: ``YarnRotaryEmbedding.__init__`` runs ``with torch.device(torch.cuda.current_device()):``
    unless ``use_cpu_initialization`` (``yarn_rotary_pos_embedding.py`` lines 76-78); with the
    CUDA-on-CPU transfer ``current_device()`` is the ordinal 0, and ``torch.device(0)`` itself
    raises ``Cannot access accelerator device when none is available`` (no patch of a context
    reaches a constructor of ``torch.device``); without the transfer ``current_device()`` raises.
    ``forward`` moves ``inv_freq_extra``/``inv_freq_inter`` to ``current_device()`` (lines 122-126).
    Multi-latent attention with ``rope_type="yarn"`` (DeepSeek's default) builds it.
    How: ``current_device()`` of the CPU view is the CPU device.
    Upstream reference: megatron-core 0.19.2,
    ``megatron/core/models/common/embeddings/yarn_rotary_pos_embedding.py``.
    Drop when: upstream allocates on the device of its input or of ``torch.get_default_device()``.
    """
)

ROTARY_POS_EMBEDDING = _view(
    """Patch for ``megatron.core.models.common.embeddings.rotary_pos_embedding.torch``.

    Why: ``RotaryEmbedding.forward`` moves ``inv_freq`` to ``torch.cuda.current_device()``
    whenever it is on the CPU (``rotary_pos_embedding.py`` line 162, "move `inv_freq` to GPU
    once"), and ``__init__`` allocates it there unless ``use_cpu_initialization`` (line 78).
    How: ``current_device()`` of the CPU view is the CPU device, so ``inv_freq`` stays put.
    Upstream reference: megatron-core 0.19.2,
    ``megatron/core/models/common/embeddings/rotary_pos_embedding.py``.
    Drop when: upstream moves ``inv_freq`` to the device of its input.
    """
)

OPTIMIZER = _view(
    """Patch for ``megatron.core.optimizer.optimizer.torch``.

    Why: ``MixedPrecisionOptimizer.__init__`` creates ``found_inf`` (line 690) and
    ``_dummy_overflow_buf`` (line 698), and ``FP32Optimizer`` its ``_scale`` (line 1249), all
    with ``device='cuda'``: ``get_megatron_optimizer`` fails at every precision.
    How: the CPU view maps ``device='cuda'`` to ``cpu``; found-inf detection, its all-reduce
    and the skipped step then run as upstream wrote them.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/optimizer.py``.
    Drop when: upstream allocates these on the parameters' device.
    """
)

DISTRIB_OPTIMIZER = _view(
    """Patch for ``megatron.core.optimizer.distrib_optimizer.torch``.

    Why: when a checkpoint is loaded into a distributed optimizer whose torch optimizer has
    no state yet, ``DistributedOptimizer.load_state_dict`` allocates that state with
    ``torch.empty((numel,), dtype=dtype, device=torch.cuda.current_device())``
    (``distrib_optimizer.py`` line 998). (Training and saving do not reach it.)
    How: ``current_device()`` of the CPU view is the CPU device.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/distrib_optimizer.py``.
    Drop when: upstream allocates the state on the parameters' device.
    """
)

CLIP_GRADS = _view(
    """Patch for ``megatron.core.optimizer.clip_grads.torch``.

    Why: ``get_grad_norm_fp32`` allocates ``total_norm`` and ``dummy_overflow_buf`` with
    ``device='cuda'`` (``clip_grads.py`` lines 96-112), as do ``clip_grad_by_total_norm_fp32``
    (line 180) and ``count_zeros_fp32`` (line 231): every optimizer step computes the
    gradient norm.
    How: the CPU view maps ``device='cuda'`` to ``cpu``.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/clip_grads.py``.
    Drop when: upstream allocates on the gradients' device.
    """
)

GRAD_SCALER = _view(
    """Patch for ``megatron.core.optimizer.grad_scaler.torch``.

    Why: ``MegatronGradScaler.__init__`` and ``DynamicGradScaler.__init__`` create the loss
    scale and its bounds with ``device='cuda'`` (``grad_scaler.py`` lines 20, 111-117): fp16
    training (dynamic loss scaling) cannot start. Only fp16 reaches it (bf16 and fp32 have
    no grad scaler by default).
    How: the CPU view maps ``device='cuda'`` to ``cpu``. (``load_state_dict``'s
    ``.cuda(...)`` is a Tensor method: see ``optimizer.dynamic_grad_scaler_load_state_dict``.)
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/grad_scaler.py``.
    Drop when: upstream allocates the scale on a configurable device.
    """
)

FILESYSTEM_ASYNC = _view(
    """Patch for ``megatron.core.dist_checkpointing.strategies.filesystem_async.torch``.

    Why: ``FileSystemWriterAsync.preload_tensors`` ends with ``torch.cuda.synchronize()``
    (``filesystem_async.py`` line 248) after staging tensors to host memory: every
    ``dist_checkpointing.save`` goes through it.
    How: the CPU view's ``synchronize`` is a no-op (CPU copies are complete when they return).
    Upstream reference: megatron-core 0.19.2,
    ``megatron/core/dist_checkpointing/strategies/filesystem_async.py``.
    Drop when: upstream synchronises only when the staged tensors were on a GPU.
    """
)

STATE_DICT_SAVER = _view(
    """Patch for ``megatron.core.dist_checkpointing.strategies.state_dict_saver.torch``.

    Why: ``save_state_dict_async_finalize`` broadcasts the failure flag in
    ``torch.tensor(..., device=torch.cuda.current_device())`` (``state_dict_saver.py`` line
    252), and ``verify_global_md_reuse`` all-reduces ``torch.tensor(..., device='cuda')`` (line 204):
    every ``dist_checkpointing.save`` finalises through the first.
    How: the CPU view maps both to ``cpu`` (gloo reduces CPU tensors).
    Upstream reference: megatron-core 0.19.2,
    ``megatron/core/dist_checkpointing/strategies/state_dict_saver.py``.
    Drop when: upstream allocates on the process group's device.
    """
)

OPTIMIZER_PACKAGE = _view(
    """Patch for ``megatron.core.optimizer.torch`` (the package's ``__init__``).

    Why: without Transformer Engine and Apex, ``_get_megatron_optimizer_based_on_param_groups``
    builds ``torch.optim.AdamW`` / ``torch.optim.Adam`` with ``lr=config.lr``
    (``__init__.py`` line 557), and ``OptimizerConfig.lr`` defaults to ``None`` (the
    scheduler sets it). torch's refuse ``None`` in ``__init__`` with a bare ``TypeError``;
    TE's and Apex's fused optimizers, which upstream expects, accept it.
    How: this view's ``torch.optim`` is ``torch_optimizers.OPTIM``: its Adam/AdamW/SGD
    accept ``lr=None`` until a scheduler sets it and say so if ``step()`` comes first;
    every other name, and the CUDA mapping, as in the other views.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/optimizer/__init__.py``.
    Drop when: upstream gives torch's optimizers a concrete learning rate.
    """,
    optim=OPTIM,
)
