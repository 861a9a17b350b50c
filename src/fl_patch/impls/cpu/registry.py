"""The pack ``cpu``: every patch that lets upstream megatron-core and megatron.training train on a machine with no GPU.

Vendor ``cpu``: chosen where no accelerator is detected, or with ``MG_FL_PREFER=cpu``; on a machine
where another vendor is chosen none of it applies. :func:`register_pack` (``fl_patch.impls.PACKS``) is
the list, top to bottom, grouped by concern; a group that depends on the machine says so at its
``if`` (``fl_patch.impls.conditions``). It calls ``register()`` with strings only: nothing is
imported until a target's module loads. The shared packs ``te`` (TE-compatible layers) and
``without_te`` (megatron-core without TE and Apex) are registered for vendor ``cpu`` at the end.
The CUDA-on-CPU transfer for the code around megatron is the pack ``cuda_on_cpu``.

Each registration carries its ``PatchDoc`` (why / how / upstream reference / when to remove):
``fl-patch --list --why`` and ``docs/patches.md`` (``python -m fl_patch.impls.index``) print them; each
impl's docstring gives the long form, with upstream's line numbers. Verified on the megatron-core
releases in ``fl_patch.impls._compat.VERIFIED_MEGATRON_CORE``; on another release the pack still applies
and says so once, when it is first used.

Left to configuration, not patched (``examples/train_gpt.py``): fusions that need Transformer Engine
or a CUDA kernel (multi-latent attention's fused RoPE). Those megatron compiles with ``torch.compile``
(``bias_activation_fusion``, ``bias_dropout_fusion``...: ``@jit_fuser``) run as written (``EAGER_FUSER``).
"""

from __future__ import annotations

from fl_patch import PatchDoc, register
from fl_patch.impls._compat import VERIFIED_MEGATRON_CORE
from fl_patch.impls.conditions import PYTHON_BEFORE_3_12
from fl_patch.impls.te import registry as te_pack
from fl_patch.impls.without_te import registry as without_te_pack

__all__ = ["CPU", "VERIFIED_MEGATRON_CORE", "register_pack"]

CPU = "cpu"
_PACK = "fl_patch.impls.cpu"
_MC = "megatron-core 0.19.2 megatron/core"
_MT = "megatron-core 0.19.2 megatron/training"

# Where a module moved between releases, each place is registered with its version gate.
_FROM_019 = "megatron-core>=0.19"
_UTILS_PACKAGE = "megatron-core>=0.18"  # 0.18 split training/utils.py into the package training/utils/
_UTILS_MODULE = "megatron-core<0.18"

# --------------------------------------------------------------------------- the name `torch`: CPU views
_VIEW_HOW = (
    "the module's name `torch` becomes a CPU view of torch (torch_view.CpuTorchView: the real torch, with "
    "torch.cuda's devices, allocations, streams, synchronisation and RNG mapped to the CPU), one documented "
    "object per module (torch_names.py, training_torch_names.py), so it can be dropped on its own"
)


def _view(why: str, upstream: str, remove_when: str, how: str = "") -> PatchDoc:
    return PatchDoc(why=why, how=f"{_VIEW_HOW}{'; ' + how if how else ''}.", upstream=upstream, remove_when=remove_when)


CORE_VIEWS: tuple[tuple[str, str, PatchDoc], ...] = (
    (
        "tensor_parallel.random",
        "TENSOR_PARALLEL_RANDOM",
        _view(
            "model_parallel_cuda_manual_seed and CudaRNGStatesTracker.add seed and read torch.cuda's RNG; on a "
            "CPU-only torch the seeds are silently queued for a CUDA init that never comes and the getters raise.",
            f"{_MC}/tensor_parallel/random.py",
            "upstream seeds and reads RNG state through a device-agnostic API",
            "its torch.cuda RNG is the CPU default generator, which dropout draws from here",
        ),
    ),
    (
        "tensor_parallel.layers",
        "TENSOR_PARALLEL_LAYERS",
        _view(
            "the linear layers allocate on torch.cuda.current_device(): the dummy weight gradient under "
            "gradient_accumulation_fusion, the sequence-parallel reduce-scatter buffer, and the weights when "
            "use_cpu_initialization is off.",
            f"{_MC}/tensor_parallel/layers.py",
            "upstream allocates on the device of the layer's input",
        ),
    ),
    (
        "utils",
        "UTILS",
        _view(
            "GlobalMemoryBuffer.get_tensor allocates on torch.cuda.current_device() (the tensor-parallel layers' "
            "all-gather buffers) and local_multi_tensor_l2_norm returns a device='cuda' tensor.",
            f"{_MC}/utils.py",
            "upstream allocates on the device of its inputs",
        ),
    ),
    (
        "transformer.utils",
        "TRANSFORMER_UTILS",
        _view(
            "get_default_causal_mask (every attention layer whose batch carries no mask) and the sliding-window "
            "mask are built with device='cuda'.",
            f"{_MC}/transformer/utils.py",
            "upstream builds the mask on the device of the attention scores",
        ),
    ),
    (
        "pipeline_parallel.schedules",
        "SCHEDULES",
        _view(
            "every schedule counts tokens in torch.zeros(..., device='cuda'): get_forward_backward_func() fails "
            "at its first call.",
            f"{_MC}/pipeline_parallel/schedules.py",
            "upstream allocates the counter on the model's device",
        ),
    ),
    (
        "distributed.param_and_grad_buffer",
        "PARAM_AND_GRAD_BUFFER",
        _view(
            "megatron DDP allocates its contiguous parameter and gradient buffers on torch.cuda.current_device() "
            "and calls torch.cuda.current_stream() on every gradient reduction.",
            f"{_MC}/distributed/param_and_grad_buffer.py",
            "upstream takes the buffers' device from the parameters",
            "the stand-in stream's waits are no-ops (CPU work is ordered)",
        ),
    ),
    (
        "models.common.embeddings.rotary_pos_embedding",
        "ROTARY_POS_EMBEDDING",
        _view(
            "RotaryEmbedding moves inv_freq to torch.cuda.current_device() whenever it is on the CPU "
            "('move inv_freq to GPU once') and allocates it there unless use_cpu_initialization.",
            f"{_MC}/models/common/embeddings/rotary_pos_embedding.py",
            "upstream moves inv_freq to the device of its input",
        ),
    ),
    (
        "models.common.embeddings.yarn_rotary_pos_embedding",
        "YARN_ROTARY_POS_EMBEDDING",
        _view(
            "YarnRotaryEmbedding (multi-latent attention's default rope_type) runs `with "
            "torch.device(torch.cuda.current_device())`, which raises without a GPU (with the CUDA-on-CPU "
            "transfer too: torch.device(0) itself raises), and moves its frequencies to current_device().",
            f"{_MC}/models/common/embeddings/yarn_rotary_pos_embedding.py",
            "upstream allocates on the device of its input or torch.get_default_device()",
            "current_device() is the CPU device",
        ),
    ),
    (
        "optimizer",
        "OPTIMIZER_PACKAGE",
        _view(
            "without TE and Apex, _get_megatron_optimizer_based_on_param_groups builds torch.optim.AdamW/Adam with "
            "lr=config.lr, and OptimizerConfig.lr defaults to None (the scheduler sets it): torch's optimizers "
            "refuse None with a bare TypeError where TE's and Apex's accept it.",
            f"{_MC}/optimizer/__init__.py",
            "upstream gives torch's optimizers a concrete learning rate, or torch accepts lr=None",
            "its torch.optim is without_te.torch_optimizers.OPTIM: Adam/AdamW/SGD taking lr=None until the "
            "scheduler sets it, and saying so if step() comes first",
        ),
    ),
    (
        "optimizer.optimizer",
        "OPTIMIZER",
        _view(
            "MixedPrecisionOptimizer creates found_inf and _dummy_overflow_buf, FP32Optimizer its _scale, with "
            "device='cuda': get_megatron_optimizer fails at every precision.",
            f"{_MC}/optimizer/optimizer.py",
            "upstream allocates these on the parameters' device",
        ),
    ),
    (
        "optimizer.distrib_optimizer",
        "DISTRIB_OPTIMIZER",
        _view(
            "loading a checkpoint into a distributed optimizer without state allocates that state on "
            "torch.cuda.current_device().",
            f"{_MC}/optimizer/distrib_optimizer.py",
            "upstream allocates the state on the parameters' device",
        ),
    ),
    (
        "optimizer.clip_grads",
        "CLIP_GRADS",
        _view(
            "get_grad_norm_fp32 (every optimizer step), clip_grad_by_total_norm_fp32 and count_zeros_fp32 "
            "allocate with device='cuda'.",
            f"{_MC}/optimizer/clip_grads.py",
            "upstream allocates on the gradients' device",
        ),
    ),
    (
        "optimizer.grad_scaler",
        "GRAD_SCALER",
        _view(
            "the fp16 loss scalers create their scale and bounds with device='cuda': fp16 training cannot start.",
            f"{_MC}/optimizer/grad_scaler.py",
            "upstream allocates the scale on a configurable device",
        ),
    ),
    (
        "dist_checkpointing.strategies.filesystem_async",
        "FILESYSTEM_ASYNC",
        _view(
            "FileSystemWriterAsync.preload_tensors ends with torch.cuda.synchronize(): every "
            "dist_checkpointing.save goes through it.",
            f"{_MC}/dist_checkpointing/strategies/filesystem_async.py",
            "upstream synchronises only when the staged tensors were on a GPU",
            "synchronize is a no-op (CPU copies are complete when they return)",
        ),
    ),
    (
        "dist_checkpointing.strategies.state_dict_saver",
        "STATE_DICT_SAVER",
        _view(
            "save_state_dict_async_finalize broadcasts its failure flag in a tensor on "
            "torch.cuda.current_device(), verify_global_md_reuse all-reduces one with device='cuda'.",
            f"{_MC}/dist_checkpointing/strategies/state_dict_saver.py",
            "upstream allocates on the process group's device",
        ),
    ),
)
"""``(megatron.core submodule, view in torch_names.py, doc)``: the megatron-core modules whose ``torch`` is a CPU view."""

TRAINING_VIEWS: tuple[tuple[str, str, str | None, PatchDoc], ...] = (
    (
        "megatron.training.initialize",
        "INITIALIZE",
        None,
        _view(
            "initialize_megatron asserts torch.cuda.is_available() ('Megatron requires CUDA.'); with no device "
            "counted it silently skips initialize_model_parallel and the RNG tracker's seeding; the JIT warm-up "
            "allocates with device='cuda'.",
            f"{_MT}/initialize.py",
            "upstream initialises without requiring (or counting) CUDA devices",
            "this module alone is told one CUDA device exists (is_available() True, device_count() 1), so "
            "upstream takes its GPU path on the CPU",
        ),
    ),
    (
        "megatron.training.arguments",
        "ARGUMENTS",
        None,
        _view(
            "validate_args asks torch.cuda.get_device_capability() before it allows --moe-grouped-gemm, which "
            "raises on a CPU-only torch although the grouped GEMM runs on the CPU.",
            f"{_MT}/arguments.py",
            "upstream asks the grouped-GEMM backend instead of the device generation",
            "its get_device_capability() answers (8, 0) ('the GroupedGEMM kernels can run'); nowhere else "
            "does fl_patch invent device properties",
        ),
    ),
    (
        "megatron.training.training",
        "TRAINING",
        None,
        _view(
            "the training and evaluation loops create bookkeeping tensors with device='cuda', get_model and "
            "_ddp_wrap use torch.cuda streams and current_device(), evaluation calls torch.cuda.empty_cache().",
            f"{_MT}/training.py",
            "upstream takes its device from an accelerator abstraction",
        ),
    ),
    (
        "megatron.training.models.dist_utils",
        "DIST_UTILS",
        "megatron-core>=0.18",
        _view(
            "0.18 moved get_model's DDP wrapping here: _ddp_wrap runs under torch.cuda streams and the model is "
            "moved with .cuda(torch.cuda.current_device()).",
            f"{_MT}/models/dist_utils.py",
            "upstream builds streams only on a CUDA device",
        ),
    ),
    (
        "megatron.training.utils.common_utils",
        "COMMON_UTILS",
        _UTILS_PACKAGE,
        _view(
            "the parameter-norm helpers and the per-iteration model-parallel reductions train_step calls allocate "
            "with device='cuda' / torch.cuda.current_device(); report_memory reads torch.cuda's statistics.",
            f"{_MT}/utils/common_utils.py (megatron/training/utils.py before 0.18)",
            "upstream allocates on the device of its inputs",
        ),
    ),
    (
        "megatron.training.utils",
        "COMMON_UTILS",
        _UTILS_MODULE,
        _view(
            "(before 0.18, one module) the parameter-norm helpers and the per-iteration model-parallel reductions "
            "allocate with device='cuda'; report_memory reads torch.cuda's statistics.",
            "megatron-core 0.17.1 megatron/training/utils.py",
            "megatron-core 0.17 is no longer supported",
        ),
    ),
    (
        "megatron.training.checkpointing",
        "CHECKPOINTING",
        None,
        _view(
            "get_rng_state saves torch.cuda.get_rng_state() and load_checkpoint restores it: without CUDA --save "
            "cannot write and --load cannot resume.",
            f"{_MT}/checkpointing.py",
            "upstream saves the RNG state of the accelerator in use, whatever it is",
            "its 'CUDA' RNG is the CPU default generator, exactly what resuming needs",
        ),
    ),
    (
        "megatron.core.timers",
        "TIMERS",
        None,
        _view(
            "Timer.start/stop call torch.cuda.synchronize() and the all-ranks timing allocates on "
            "torch.cuda.current_device(): every timed region of pretrain (reached only through megatron.training).",
            f"{_MC}/timers.py",
            "upstream synchronises through a device-agnostic API",
        ),
    ),
    (
        "megatron.core.rerun_state_machine",
        "RERUN_STATE_MACHINE",
        None,
        _view(
            "RerunStateMachine all-reduces its state in device='cuda' tensors and saves and restores torch.cuda's "
            "RNG state around every training step (reached only through megatron.training).",
            f"{_MC}/rerun_state_machine.py",
            "upstream saves the RNG state of the accelerator in use",
        ),
    ),
)
"""``(module, view in training_torch_names.py, version gate, doc)``: what megatron.training reaches."""

# --------------------------------------------------------------------------- function patches: why each exists
PAGED_STASH = PatchDoc(
    why="megatron/core/transformer/moe/ops/paged_stash.py does `import triton` unconditionally and plain "
    "`import megatron.core` reaches it (pipeline_parallel.schedules -> moe.paged_stash -> ops.paged_stash): "
    "without Triton nothing of megatron.core imports.",
    how="the whole module is replaced before its first import by one with the same names; launching one of its "
    "kernels (moe_paged_stash=True, a CUDA-only feature) raises, saying why.",
    upstream=f"{_MC}/transformer/moe/ops/paged_stash.py; Megatron-LM PR #6891 (guards the import; open)",
    remove_when="upstream guards the triton import (PR #6891 or its like is released), or the machine has Triton",
)
SET_CUDA_RNG_STATE = PatchDoc(
    why="_set_cuda_rng_state hands the change to torch.cuda._lazy_call, which without CUDA only queues it: the "
    "state is silently never set, so the RNG tracker's fork and activation recompute draw from the wrong stream "
    "and the loss changes.",
    how="sets the CPU default generator's state now (torch.set_rng_state); graph-safe states raise (CUDA graphs only).",
    upstream=f"{_MC}/tensor_parallel/random.py (_set_cuda_rng_state)",
    remove_when="upstream sets the RNG state through a device-agnostic API",
)
RNG_FORK = PatchDoc(
    why="CudaRNGStatesTracker.fork compares the CPU RNG state before and after and logs 'CPU RNG state changed "
    "within GPU RNG context' if it differs; on a CPU both are the same generator, so every fork in which dropout "
    "draws logs it (per layer, per micro-batch) and pays a full state comparison.",
    how="the same state switching as upstream (nested forks included) without the comparison that cannot hold here.",
    upstream=f"{_MC}/tensor_parallel/random.py (CudaRNGStatesTracker.fork)",
    remove_when="upstream skips that check when the CUDA generator is the CPU one",
)
_TYPE_NAMES_HOW = (
    "runs upstream unchanged while the CPU tensors involved answer tensor.type() with the CUDA type name of their "
    "dtype (an instance attribute, removed afterwards; torch.Tensor itself is never touched): upstream takes the "
    "branch it takes on a GPU for the same dtype"
)
FLOAT16_OPTIMIZER = PatchDoc(
    why="Float16OptimizerWithFloat16Params sorts parameters by param.type() against 'torch.cuda.HalfTensor' / "
    "'torch.cuda.BFloat16Tensor' / 'torch.cuda.FloatTensor' and raises TypeError otherwise: bf16/fp16 "
    "get_megatron_optimizer fails on a CPU.",
    how=_TYPE_NAMES_HOW + ".",
    upstream=f"{_MC}/optimizer/optimizer.py (Float16OptimizerWithFloat16Params.__init__)",
    remove_when="upstream tests param.dtype instead of the CUDA type string",
)
DISTRIBUTED_OPTIMIZER_INIT = PatchDoc(
    why="DistributedOptimizer.__init__ (_build_model_and_main_param_groups) sorts parameters by their CUDA type "
    "string and raises TypeError otherwise: the distributed optimizer cannot be built on a CPU at any precision.",
    how=_TYPE_NAMES_HOW + ".",
    upstream=f"{_MC}/optimizer/distrib_optimizer.py (DistributedOptimizer.__init__)",
    remove_when="upstream tests param.dtype instead of the CUDA type string",
)
CLIP_GRAD = PatchDoc(
    why="clip_grad_by_total_norm_fp32 asserts param.grad.type() == 'torch.cuda.FloatTensor': gradient clipping "
    "(clip_grad > 0, OptimizerConfig's default) fails on a CPU.",
    how=_TYPE_NAMES_HOW + "; a non-fp32 gradient still fails the assertion as on a GPU.",
    upstream=f"{_MC}/optimizer/clip_grads.py (clip_grad_by_total_norm_fp32)",
    remove_when="upstream checks param.grad.dtype == torch.float32",
)
GRAD_SCALER_LOAD = PatchDoc(
    why="DynamicGradScaler.load_state_dict does state_dict['scale'].cuda(torch.cuda.current_device()), a Tensor "
    "method no view of the module's torch reaches: resuming an fp16 run fails on a CPU.",
    how="the same three assignments with the scale moved to the CPU, where the scaler's other tensors live.",
    upstream=f"{_MC}/optimizer/grad_scaler.py (DynamicGradScaler.load_state_dict)",
    remove_when="upstream moves the scale with .to(self._scale.device) or similar",
)
TORCH_SGD = PatchDoc(
    why="without TE and Apex megatron-core's SGD is torch.optim.SGD, called with lr=config.lr, and "
    "OptimizerConfig.lr defaults to None (the scheduler sets it): torch refuses None with a bare TypeError.",
    how="a torch.optim.SGD subclass (without_te.torch_optimizers.SGD) whose param groups may carry lr None until "
    "the scheduler sets one; a step() before that raises, naming the group; an lr given passes through unchanged.",
    upstream=f"{_MC}/optimizer/__init__.py (the SGD fallback name)",
    remove_when="upstream passes a concrete learning rate to torch's optimizers, or torch accepts lr=None",
)
HYBRID_OPTIMIZER = PatchDoc(
    why="--optimizer-cpu-offload: HybridDeviceOptimizer splits parameters by param.is_cuda and treats every host "
    "parameter as an offloaded copy; on a machine without a GPU every parameter is on the host and the first "
    "step() fails with KeyError (cpu_copys_map_gpu_param).",
    how="the same split with the host as the device: each parameter counts toward offload_fraction and is either "
    "offloaded (a host copy, refreshed after each step) or stepped in place; upstream's return tuple.",
    upstream=f"{_MC}/optimizer/cpu_offloading/hybrid_optimizer.py (_get_sub_optimizer_param_groups)",
    remove_when="upstream splits by an explicit device choice rather than is_cuda",
)
FUSED_SOFTMAX = PatchDoc(
    why="FusedScaleMaskSoftmax.is_kernel_available decides from shapes and masked_softmax_fusion (True by "
    "default) alone; for fp16/bf16 attention it imports the CUDA extension scaled_masked_softmax_cuda: "
    "ModuleNotFoundError in the first attention forward.",
    how="False: the fused kernel never exists on a CPU, so upstream's own forward_torch_softmax (same maths) runs.",
    upstream=f"{_MC}/fusions/fused_softmax.py (FusedScaleMaskSoftmax.is_kernel_available)",
    remove_when="upstream checks that the extension imports (or the tensor's device) before choosing the kernel",
)
INDICES_TO_MULTIHOT = PatchDoc(
    why="fused_indices_to_multihot launches a Triton kernel; without Triton megatron binds triton.jit to a "
    "null_decorator wrapped in @contextmanager, so the first call raises TypeError ('_GeneratorContextManager' "
    "object is not subscriptable): the flex token dispatcher and Megatron-LM's tests of the converter reach it.",
    how="the same mapping and its backward in torch, on whatever device the tensors are.",
    upstream=f"{_MC}/fusions/fused_indices_converter.py, {_MC}/utils.py (null_decorator)",
    remove_when="the machine has Triton and a GPU, or upstream's fallback runs without Triton",
)
ROPE_FUSION = PatchDoc(
    why="apply_rope_fusion=True (most GPU recipes) looks up TE's fused RoPE functions, which rope_utils binds to "
    "None without TE: TransformerConfig refuses the config ('apply_rope_fusion is not available. Please install "
    "TE >= 1.4').",
    how="the two functions with TE's signatures and semantics in plain torch (rope.py): the rotated part in "
    "float32, cast back; thd positions per packed sequence and CP slice; autograd gives the backward "
    "(create=True installs them over the None).",
    upstream=f"{_MC}/models/common/embeddings/rope_utils.py, {_MC}/extensions/transformer_engine.py "
    "(fused_apply_rotary_pos_emb*)",
    remove_when="megatron falls back to its unfused RoPE where the fused functions are absent",
)
TE_VERSION = PatchDoc(
    why="megatron asks which TE is installed in several places, each by whether `import transformer_engine` "
    "succeeds; anything importable under that name (a stand-in that lets TE-importing tests collect, a "
    "half-installed wheel) makes them answer differently or claim a TE that cannot run here.",
    how="one decision (te_version.installed_te_version: the installed distribution's version, else a real "
    "module's __version__, never a module marked __fl_patch_stand_in__), in each helper's own convention "
    "(0.0.0 or None for no TE).",
    upstream=f"{_MC}/utils.py (get_te_version, is_te_min_version), "
    f"{_MC}/distributed/fsdp/src/megatron_fsdp/utils.py (get_te_version)",
    remove_when="megatron asks one helper, keyed on TE's distribution",
)
DESTROY_GROUPS = PatchDoc(
    why="destroy_model_parallel drops its groups without destroy_process_group (only its own *_GLOO ones): torch "
    "keeps them, and a gloo group keeps threads and sockets for life; each init/destroy cycle left ~20 groups and "
    "~60 threads per rank (Megatron-LM's test_param_and_grad_buffer.py reached 1,253 groups and 3,736 threads).",
    how="upstream, then each gloo group megatron's create_group made on this rank (its own record, "
    "_global_process_group_list) and torch still holds is destroyed at the next call; NCCL groups and groups "
    "others created are left alone.",
    upstream=f"{_MC}/parallel_state.py (create_group, destroy_model_parallel); Megatron-LM issue #6897, PRs #6902 "
    "and #7029 (destroy the groups it created; open)",
    remove_when="upstream's destroy_model_parallel destroys the groups it created (issue #6897 fixed in a release)",
)
NCCL_OPTIONS = PatchDoc(
    why="get_nccl_options builds torch.distributed.ProcessGroupNCCL.Options for a group named in nccl_comm_cfgs "
    "(--use-torch-fsdp2 puts dp_cp there); a CPU torch has no ProcessGroupNCCL: AttributeError in "
    "initialize_model_parallel.",
    how="None where torch has no NCCL (upstream's answer for a group without configuration); with NCCL, upstream.",
    upstream=f"{_MC}/parallel_state.py (get_nccl_options)",
    remove_when="upstream asks for NCCL options only when the group's backend is NCCL",
)
MOE_SPLITS = PatchDoc(
    why="the alltoall token dispatcher moves its split sizes to the host as numpy with maybe_move_tensor_to_cpu, "
    "which converts only a tensor that is_cuda; on a CPU they stay tensors and gloo's all_to_all_single refuses "
    "them (TypeError) at the first MoE layer with expert_model_parallel_size > 1.",
    how="a CPU tensor asked for as numpy becomes numpy (what a CUDA tensor becomes upstream); the rest goes to "
    "upstream.",
    upstream=f"{_MC}/transformer/moe/moe_utils.py (maybe_move_tensor_to_cpu)",
    remove_when="upstream converts by as_numpy rather than by the tensor's device",
)
FA_VERSION = PatchDoc(
    why="get_fa_version imports flash_attn unguarded, so is_fa_min_version raises ModuleNotFoundError where "
    "flash-attn is absent instead of answering False (Megatron-LM's inference tests call it at collection).",
    how="version 0.0.0 where flash_attn cannot be found (what get_te_version does for an absent TE); with "
    "flash-attn installed, upstream.",
    upstream=f"{_MC}/utils.py (get_fa_version)",
    remove_when="upstream guards the import, as it does for TE",
)
CHECKPOINT_WITHOUT_OUTPUT = PatchDoc(
    why="CheckpointWithoutOutput sets self.fp8 = fp8 is not None, so the default fp8=False means 'fp8 on', and "
    "recompute calls TE's FP8GlobalStateManager, a name imported only with TE: NameError in the first forward with "
    "recompute_modules such as layernorm or moe_act and no TE.",
    how="without TE, fp8 None or False is no fp8 (self.fp8 = False); an fp8 request raises, saying TE is needed; "
    "with TE, upstream unchanged.",
    upstream=f"{_MC}/tensor_parallel/random.py (CheckpointWithoutOutput.__init__)",
    remove_when="upstream tests fp8 for truth and guards the TE names",
)
COMPILE_HELPERS = PatchDoc(
    why="compile_helpers runs `make -C megatron/core/datasets` and sys.exit(1)s when it fails; the megatron-core "
    "wheel ships the built helpers_cpp but no Makefile, so the process exits (run_simple_mcore_train_loop.py calls "
    "it on rank 0). A wheel problem: a GPU machine with the wheel hits it too.",
    how="nothing to compile when megatron.core.datasets.helpers_cpp can be found; otherwise upstream.",
    upstream=f"{_MC}/datasets/utils.py (compile_helpers)",
    remove_when="upstream skips the build when the extension is already there",
)
SIGNAL_HANDLER_DEVICE = PatchDoc(
    why="(a FlagScale target) get_device picks the exit signal handler's device from the backend and raises "
    "RuntimeError for any backend but nccl and gloo, such as --fake-process-group's 'fake'.",
    how="the CPU device: every collective runs on CPU tensors here, whatever the backend.",
    upstream=f"{_MT}/dist_signal_handler.py (get_device)",
    remove_when="upstream derives the device from the backend's supported devices",
)
DEVICE_ARCH = PatchDoc(
    why="(a FlagScale target) get_device_arch_version reads torch.cuda.get_device_properties('cuda:0').major; "
    "validate_args calls it whenever tensor or context parallelism is on: --tensor-model-parallel-size 2 fails "
    "before training.",
    how="0, 'no CUDA architecture': upstream takes its pre-Blackwell branch (CUDA_DEVICE_MAX_CONNECTIONS=1, which "
    "the parser defaults below set, and no high-priority stream groups).",
    upstream=f"{_MT}/utils/common_utils.py (megatron/training/utils.py before 0.18)",
    remove_when="upstream asks an accelerator abstraction for the device generation",
)
COMPILE_DEPENDENCIES = PatchDoc(
    why="(a FlagScale target) _compile_dependencies has rank 0 call compile_helpers(), which runs make where the "
    "wheel ships no Makefile and sys.exit(1)s: pretrain exits right after initialising.",
    how="when helpers_cpp can be found only upstream's closing barrier runs; otherwise upstream unchanged.",
    upstream=f"{_MT}/initialize.py (_compile_dependencies), {_MC}/datasets/utils.py",
    remove_when="upstream skips the build when the extension is already there",
)
WARMUP_JIT = PatchDoc(
    why="_warmup_jit_function draws torch.rand(device='cuda') inputs right after seeding; on a CPU the 'CUDA' "
    "generator is the CPU one, so the draws shift every --use-cpu-initialization weight (by a TP-dependent amount).",
    how="upstream's warm-up inside torch.random.fork_rng(): the generator leaves it as it entered; the call is "
    "passed exactly as received (0.19 takes tp_size, 0.17/0.18 nothing).",
    upstream=f"{_MT}/initialize.py (_warmup_jit_function)",
    remove_when="upstream draws its warm-up inputs from a private generator",
)
DATA_LOADER = PatchDoc(
    why="build_pretraining_data_loader's DataLoader has no generator, so each iterator draws its base seed from "
    "the default generator, which on a CPU is the one dropout draws from: --load does not reproduce the losses, "
    "and TP ranks (only rank 0 builds loaders) drift apart.",
    how="the loader gets its own torch.Generator seeded with --seed; sampling itself is untouched.",
    upstream=f"{_MT}/datasets/data_samplers.py (build_pretraining_data_loader)",
    remove_when="upstream passes a generator to its DataLoader",
)
PARSER_DEFAULTS = PatchDoc(
    why="megatron.training's parser defaults to a GPU: NCCL, weights on torch.cuda.current_device(), the fused "
    "weight-gradient extension, Apex's persistent layer norm, NCCL's PREMUL_SUM under FSDP; each stops pretrain "
    "on a CPU.",
    how="upstream builds the parser, then the CPU necessities (training_defaults.CPU_DEFAULTS: --distributed-backend "
    "gloo, --use-cpu-initialization, ...) become its defaults, so a flag given still wins; rank 0 says once which "
    "it applied.",
    upstream=f"{_MT}/arguments.py (add_megatron_arguments)",
    remove_when="upstream chooses its defaults from the accelerator present",
)
TENSOR_CUDA = PatchDoc(
    why="pretrain_gpt.py moves each batch with batch[key].cuda(non_blocking=True) and get_model calls "
    "model.cuda(...): a method of the tensor, out of reach of any module view, raising 'Torch not compiled with "
    "CUDA enabled' on a CPU-only torch.",
    how="the tensor on the CPU (the same object when already there, as upstream returns self on its device); "
    "installed only where the cpu vendor is chosen, where Tensor.cuda can only fail.",
    upstream=f"torch 2.13 Tensor.cuda; Megatron-LM pretrain_gpt.py (core_v0.19.0); {_MT}/training.py",
    remove_when="Megatron-LM moves batches with .to(device) of an accelerator abstraction",
)
TYPING_OVERRIDE = PatchDoc(
    why="megatron/training/models/gpt.py and hybrid.py import typing.override, new in Python 3.12; megatron-core "
    "0.19 declares Python >= 3.12 but otherwise runs on 3.11, where `import megatron.training` fails.",
    how="typing_extensions.override (marks __override__ as 3.12's does), created in typing (create=True).",
    upstream=f"{_MT}/models/gpt.py line 14, {_MT}/models/hybrid.py line 5",
    remove_when="Python 3.11 is no longer used, or upstream imports it from typing_extensions",
)

DEFERRED_COMPILE = PatchDoc(
    why="importing megatron.core calls torch.compile at module level (router.py's @torch.compile, and each of about "
    "forty @jit_fuser where EAGER_FUSER is disabled); the first imports dynamo and inductor, 1.8 s of CPU of every "
    "megatron process, also where no compiled function is ever called.",
    how="a function given to torch.compile is compiled, with the same arguments, at its first call (once, under a "
    "lock), so a run that calls none never loads the compiler and one that does pays it at the first call; an "
    "nn.Module, and a call torch refuses, go to torch at once; called while dynamo traces, the plain function runs "
    "(dynamo inlines it).",
    upstream=f"torch 2.13 torch/__init__.py (compile); {_MC}/jit.py, {_MC}/transformer/moe/router.py line 918",
    remove_when="torch imports its compiler lazily, or megatron stops compiling at import",
)

EAGER_FUSER = PatchDoc(
    why="jit_fuser is torch.compile: megatron.training turns the bias fusions on and compiles them before the first "
    "step, so on a CPU every training process ran dynamo and inductor, which builds C++ at the first call (bench/"
    "startup.py --training, a small one-rank run: 6.7 s of CPU as written, 10.8 s compiled, 21.2 s with an empty "
    "inductor cache); megatron's own --disable-jit-fuser acts after the fusions are decorated.",
    how="the decorator megatron reads returns the function unchanged, as upstream's disable_jit_fuser() does: the "
    "same code, run eagerly (dropout inside draws from torch's generator); FL_PATCH_DISABLE=megatron.core.jit."
    "jit_fuser keeps the compiled functions.",
    upstream=f"{_MC}/jit.py, {_MT}/initialize.py (_warmup_jit_function)",
    remove_when="megatron chooses its fuser by device, or inductor's CPU build costs little at start",
)


def register_pack() -> None:
    """The ``cpu`` pack (``fl_patch.impls.PACKS``): every registration, for vendor ``cpu``."""
    # ==================================================================== megatron-core
    # -- Importing megatron.core at all: upstream's module does `import triton` unconditionally (0.19 moved the
    #    kernels here; any release's unguarded triton import is also covered by hooks/gpu_only.py).
    register(
        target="megatron.core.transformer.moe.ops.paged_stash",
        impl=f"{_PACK}.paged_stash_ops",
        vendor=CPU,
        requires=_FROM_019,
        doc=PAGED_STASH,
    )

    # -- The name `torch` in modules that allocate on, or synchronise with, the GPU: a CPU view of torch each.
    for module, view, doc in CORE_VIEWS:
        register(target=f"megatron.core.{module}.torch", impl=f"{_PACK}.torch_names.{view}", vendor=CPU, doc=doc)

    # -- The RNG tracker: setting the "CUDA" RNG state must really set the CPU generator's.
    register(
        target="megatron.core.tensor_parallel.random._set_cuda_rng_state",
        impl=f"{_PACK}.rng.set_cuda_rng_state",
        vendor=CPU,
        doc=SET_CUDA_RNG_STATE,
    )
    register(
        target="megatron.core.tensor_parallel.random.CudaRNGStatesTracker.fork",
        impl=f"{_PACK}.rng.fork",
        vendor=CPU,
        doc=RNG_FORK,
    )

    # -- Optimizers that recognise tensors by their CUDA type name, or move state with .cuda().
    register(
        target="megatron.core.optimizer.optimizer.Float16OptimizerWithFloat16Params.__init__",
        impl=f"{_PACK}.optimizer.float16_optimizer_init",
        vendor=CPU,
        doc=FLOAT16_OPTIMIZER,
    )
    register(
        target="megatron.core.optimizer.distrib_optimizer.DistributedOptimizer.__init__",
        impl=f"{_PACK}.optimizer.distributed_optimizer_init",
        vendor=CPU,
        doc=DISTRIBUTED_OPTIMIZER_INIT,
    )
    register(
        target="megatron.core.optimizer.clip_grads.clip_grad_by_total_norm_fp32",
        impl=f"{_PACK}.optimizer.clip_grad_by_total_norm_fp32",
        vendor=CPU,
        doc=CLIP_GRAD,
    )
    register(
        target="megatron.core.optimizer.grad_scaler.DynamicGradScaler.load_state_dict",
        impl=f"{_PACK}.optimizer.dynamic_grad_scaler_load_state_dict",
        vendor=CPU,
        doc=GRAD_SCALER_LOAD,
    )

    # -- torch's SGD where megatron expects TE's/Apex's: lr=None (the default; the scheduler sets it) accepted.
    #    (Adam/AdamW: the view of megatron.core.optimizer's torch above.)
    register(
        target="megatron.core.optimizer.SGD",
        impl="fl_patch.impls.without_te.torch_optimizers.SGD",
        vendor=CPU,
        doc=TORCH_SGD,
    )

    # -- --optimizer-cpu-offload with every parameter on the host.
    register(
        target="megatron.core.optimizer.cpu_offloading.hybrid_optimizer.HybridDeviceOptimizer._get_sub_optimizer_param_groups",
        impl=f"{_PACK}.optimizer.hybrid_optimizer_param_groups",
        vendor=CPU,
        doc=HYBRID_OPTIMIZER,
    )

    # -- Fused kernels megatron would choose although they cannot run here.
    register(
        target="megatron.core.fusions.fused_softmax.FusedScaleMaskSoftmax.is_kernel_available",
        impl=f"{_PACK}.fusions.fused_softmax_kernel_available",
        vendor=CPU,
        doc=FUSED_SOFTMAX,
    )
    register(
        target="megatron.core.fusions.fused_indices_converter.fused_indices_to_multihot",
        impl=f"{_PACK}.fusions.fused_indices_to_multihot",
        vendor=CPU,
        doc=INDICES_TO_MULTIHOT,
    )

    # -- apply_rope_fusion=True: TE's fused RoPE functions, on the host (create=True: upstream binds None without TE).
    for name in ("fused_apply_rotary_pos_emb", "fused_apply_rotary_pos_emb_thd"):
        register(
            target=f"megatron.core.models.common.embeddings.rope_utils.{name}",
            impl=f"{_PACK}.rope.{name}",
            vendor=CPU,
            create=True,
            doc=ROPE_FUSION,
        )

    # -- Which Transformer Engine is installed: one answer for megatron's helpers.
    register(
        target="megatron.core.utils.get_te_version",
        impl=f"{_PACK}.te_version.core_get_te_version",
        vendor=CPU,
        doc=TE_VERSION,
    )
    register(
        target="megatron.core.distributed.fsdp.src.megatron_fsdp.utils.get_te_version",
        impl=f"{_PACK}.te_version.fsdp_get_te_version",
        vendor=CPU,
        doc=TE_VERSION,
    )

    # -- Process groups: the gloo groups megatron drops are freed; no NCCL options where torch has no NCCL.
    register(
        target="megatron.core.parallel_state.destroy_model_parallel",
        impl=f"{_PACK}.process_groups.destroy_model_parallel",
        vendor=CPU,
        doc=DESTROY_GROUPS,
    )
    register(
        target="megatron.core.parallel_state.get_nccl_options",
        impl=f"{_PACK}.process_groups.get_nccl_options",
        vendor=CPU,
        doc=NCCL_OPTIONS,
    )

    # -- MoE with expert parallelism over gloo: the alltoall dispatcher's split sizes as numpy.
    register(
        target="megatron.core.transformer.moe.moe_utils.maybe_move_tensor_to_cpu",
        impl=f"{_PACK}.moe.maybe_move_tensor_to_cpu",
        vendor=CPU,
        doc=MOE_SPLITS,
    )

    # -- megatron-core without flash-attn / TE, or from the wheel: upstream problems, fixed always here.
    register(
        target="megatron.core.utils.get_fa_version",
        impl=f"{_PACK}.without_extensions.get_fa_version",
        vendor=CPU,
        doc=FA_VERSION,
    )
    register(
        target="megatron.core.tensor_parallel.random.CheckpointWithoutOutput.__init__",
        impl=f"{_PACK}.without_extensions.checkpoint_without_output_init",
        vendor=CPU,
        doc=CHECKPOINT_WITHOUT_OUTPUT,
    )
    register(
        target="megatron.core.datasets.utils.compile_helpers",
        impl=f"{_PACK}.without_extensions.compile_helpers",
        vendor=CPU,
        doc=COMPILE_HELPERS,
    )

    # ==================================================================== megatron.training (pretrain_gpt.py)
    # -- The name `torch` in the modules megatron.training.pretrain goes through (docs/training_pack.md).
    for module, view, requires, doc in TRAINING_VIEWS:
        register(
            target=f"{module}.torch",
            impl=f"{_PACK}.training_torch_names.{view}",
            vendor=CPU,
            requires=requires,
            doc=doc,
        )

    # -- FlagScale's megatron.training targets.
    register(
        target="megatron.training.dist_signal_handler.get_device",
        impl=f"{_PACK}.training_functions.get_device",
        vendor=CPU,
        doc=SIGNAL_HANDLER_DEVICE,
    )
    for utils, requires in (("utils.common_utils", _UTILS_PACKAGE), ("utils", _UTILS_MODULE)):
        register(
            target=f"megatron.training.{utils}.get_device_arch_version",
            impl=f"{_PACK}.training_functions.get_device_arch_version",
            vendor=CPU,
            requires=requires,
            doc=DEVICE_ARCH,
        )
    register(
        target="megatron.training.initialize._compile_dependencies",
        impl=f"{_PACK}.training_functions.compile_dependencies",
        vendor=CPU,
        doc=COMPILE_DEPENDENCIES,
    )

    # -- The "CUDA" generator is the CPU generator: CPU draws upstream assumes separate from dropout's.
    register(
        target="megatron.training.initialize._warmup_jit_function",
        impl=f"{_PACK}.training_functions.warmup_jit_function",
        vendor=CPU,
        doc=WARMUP_JIT,
    )
    register(
        target="megatron.training.datasets.data_samplers.build_pretraining_data_loader",
        impl=f"{_PACK}.training_functions.build_pretraining_data_loader",
        vendor=CPU,
        doc=DATA_LOADER,
    )

    # -- Command-line defaults only a CPU needs (said once, on rank 0).
    register(
        target="megatron.training.arguments.add_megatron_arguments",
        impl=f"{_PACK}.training_defaults.add_megatron_arguments",
        vendor=CPU,
        doc=PARSER_DEFAULTS,
    )

    # -- Outside megatron: what a training script itself calls, and Python 3.11.
    register(target="torch.Tensor.cuda", impl=f"{_PACK}.training_functions.tensor_cuda", vendor=CPU, doc=TENSOR_CUDA)
    # -- Start-up: torch.compile at import time (megatron's decorators) defers the compiler to the first call.
    register(target="torch.compile", impl=f"{_PACK}.lazy_compile.compile", vendor=CPU, doc=DEFERRED_COMPILE)
    # -- ...and megatron's JIT fusions run as written: no C++ build at a training run's start.
    register(target="megatron.core.jit.jit_fuser", impl=f"{_PACK}.fusions.eager_jit_fuser", vendor=CPU, doc=EAGER_FUSER)
    if PYTHON_BEFORE_3_12:
        register(
            target="typing.override",
            impl=f"{_PACK}.training_functions.override",
            vendor=CPU,
            create=True,
            doc=TYPING_OVERRIDE,
        )

    # ==================================================================== shared packs, for vendor cpu
    # -- te: Transformer Engine's layers in plain torch for megatron-core's TE layer spec (only where TE is absent:
    #    its condition is inside), docs/te_spec.md.
    te_pack.register_pack(vendor=CPU)
    # -- without_te: megatron-core without TE and Apex (the distributed optimizer's checkpoints with torch's Adam,
    #    gradient_accumulation_fusion without Apex's extension), each group under its condition.
    without_te_pack.register_pack(vendor=CPU)
