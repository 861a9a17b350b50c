"""The name ``torch`` in each ``megatron.training`` module (and the two megatron-core modules only it reaches) that assumes CUDA.

Same mechanism as ``torch_names.py`` (one :class:`~fl_patch.impls.cpu.torch_view.CpuTorchView`
per module, installed by ``training_registry.py`` as ``<module>.torch``), for the modules
that ``megatron.training.pretrain`` (Megatron-LM's ``pretrain_gpt.py``) goes through.

Only ``megatron.training.initialize`` is told that a CUDA device exists
(:data:`~fl_patch.impls.cpu.torch_view.CPU_TORCH_ONE_DEVICE`): it refuses to start
without one and skips model-parallel setup and seeding when it counts none. Every other
module gets the truthful view (no CUDA device; CUDA calls land on the CPU), because some
of them branch on ``torch.cuda.is_available()`` to build ``f"cuda:{current_device()}"``
strings that no mapping could rescue.

Every module here was checked by turning its patch off (``FL_PATCH_DISABLE=<target>``)
with ``tests/support/train_pretrain.py`` (``tests/impls/test_cpu_training.py``): each one,
off, makes the run fail at the line named. Line numbers are those of megatron-core 0.19.2.
"""

from __future__ import annotations

from .torch_view import CpuTorchView

__all__ = [
    "ARGUMENTS",
    "CHECKPOINTING",
    "COMMON_UTILS",
    "DIST_UTILS",
    "INITIALIZE",
    "RERUN_STATE_MACHINE",
    "TIMERS",
    "TRAINING",
]


def _view(doc: str, *, reports_cuda_device: bool = False, capability: tuple[int, int] | None = None) -> CpuTorchView:
    view = CpuTorchView(reports_cuda_device=reports_cuda_device, capability=capability)
    view.__doc__ = doc
    return view


INITIALIZE = _view(
    """Patch for ``megatron.training.initialize.torch``.

    Why: ``initialize_megatron`` starts with ``assert torch.cuda.is_available(), "Megatron
    requires CUDA."`` (``initialize.py`` line 66); ``_initialize_distributed`` calls
    ``mpu.initialize_model_parallel`` only ``if device_count > 0`` (line 358, from
    ``torch.cuda.device_count()`` at line 270), and ``_set_random_seed`` seeds the
    model-parallel RNG tracker only ``if torch.cuda.device_count() > 0`` (line 447): with no
    device counted, tensor parallelism and the dropout RNG tracker are silently never set
    up. ``_warmup_jit_function`` allocates with ``device="cuda"`` (lines 508-547) and calls
    ``torch.cuda.empty_cache()`` (line 558).
    How: the one-device CPU view: ``is_available()`` is True and ``device_count()`` is 1, so
    upstream takes its GPU path; ``set_device`` and ``empty_cache`` are no-ops, ``"cuda"``
    allocations land on the CPU, and the "CUDA" seeds go to the CPU generator.
    Upstream reference: megatron-core 0.19.2, ``megatron/training/initialize.py``.
    Drop when: upstream initialises without requiring (or counting) CUDA devices.
    """,
    reports_cuda_device=True,
)

ARGUMENTS = _view(
    """Patch for ``megatron.training.arguments.torch``.

    Why: ``validate_args`` asks the GPU generation before it allows ``--moe-grouped-gemm``:
    ``dc = torch.cuda.get_device_capability(); assert dc[0] >= 8, "Unsupported compute
    capability for GroupedGEMM kernels."`` (``arguments.py`` lines 1338-1340). On a
    CPU-only torch the call raises "Torch not compiled with CUDA enabled" before any model
    code, although the grouped GEMM runs on the CPU (the TE spec's grouped linear stand-in,
    ``te_modules.py``; megatron's non-TE ``GroupedMLP`` path).
    How: the CPU view (no CUDA device) whose ``get_device_capability()`` answers (8, 0): the
    question there is "can the GroupedGEMM kernels run", and on the CPU they can. Only this
    module gets the answer: ``validate_args`` asks nothing else of it, and nowhere else does
    fl_patch invent device properties (fp8's, Blackwell's gates elsewhere still see torch's
    own answer and refuse).
    Upstream reference: megatron-core 0.19.2, ``megatron/training/arguments.py``.
    Drop when: upstream asks the grouped-GEMM backend instead of the device generation.
    """,
    capability=(8, 0),
)

TRAINING = _view(
    """Patch for ``megatron.training.training.torch``.

    Why: the training and evaluation loops create bookkeeping tensors with ``device='cuda'``:
    the start-time all-reduce in ``pretrain`` (``training.py`` lines 1131, 1137), the data
    loader flags in ``build_train_valid_test_data_loaders`` (lines 4588-4591), the
    per-iteration loss sums in ``training_log`` (lines 2613, 2884) and
    ``evaluate`` (line 4270); ``get_model`` and ``_ddp_wrap`` call
    ``torch.cuda.current_device()``, ``torch.cuda.Stream()`` and ``torch.cuda.stream()``
    (lines 1818, 1876-1896); ``torch.cuda.empty_cache()`` runs after evaluation (line 4264).
    How: the CPU view (no CUDA device): those tensors are created on the CPU, streams are
    stand-ins, ``empty_cache`` is a no-op.
    Upstream reference: megatron-core 0.19.2, ``megatron/training/training.py``.
    Drop when: upstream takes its device from an accelerator abstraction.
    """
)

DIST_UTILS = _view(
    """Patch for ``megatron.training.models.dist_utils.torch``.

    Why: the model-builder path (``megatron/training/models``) wraps the model in DDP in
    ``_ddp_wrap`` under ``torch.cuda.Stream()`` / ``torch.cuda.current_stream()`` /
    ``torch.cuda.stream(...)`` (``dist_utils.py`` lines 303-366) and moves it with
    ``model_module.cuda(torch.cuda.current_device())`` (line 174).
    How: the CPU view's streams are stand-ins (CPU work is ordered), ``current_device()``
    is the CPU device.
    Upstream reference: megatron-core 0.19.2, ``megatron/training/models/dist_utils.py``.
    Drop when: upstream builds streams only on a CUDA device.
    """
)

COMMON_UTILS = _view(
    """Patch for ``megatron.training.utils.common_utils.torch``.

    Why: the parameter-norm helpers allocate with ``device='cuda'`` (``common_utils.py``
    ``_compute_norm_2`` lines 55-60, ``calc_dtensor_params_l2_norm`` lines 222-227);
    ``reduce_max_stat_across_model_parallel_group`` and
    ``logical_and_across_model_parallel_group`` (which ``train_step`` calls every
    iteration) allocate with ``device=torch.cuda.current_device()`` (lines 285, 308);
    ``report_memory`` reads ``torch.cuda.memory_allocated()`` and friends (lines 322-327).
    How: the CPU view: those tensors are on the CPU, memory statistics are 0.
    Upstream reference: megatron-core 0.19.2, ``megatron/training/utils/common_utils.py``.
    Drop when: upstream allocates on the device of its inputs.
    """
)

CHECKPOINTING = _view(
    """Patch for ``megatron.training.checkpointing.torch``.

    Why: ``get_rng_state`` saves ``torch.cuda.get_rng_state()`` (``checkpointing.py`` line
    417) and ``load_checkpoint`` restores it with ``torch.cuda.set_rng_state(...)`` (lines
    2665, 2677); without CUDA both fail, so ``--save`` cannot write and ``--load`` cannot
    resume.
    How: the CPU view's "CUDA" RNG is the CPU default generator (the one dropout draws from
    here), so saving and restoring it is exactly what resuming needs.
    Upstream reference: megatron-core 0.19.2, ``megatron/training/checkpointing.py``.
    Drop when: upstream saves the RNG state of the accelerator in use, whatever it is.
    """
)

TIMERS = _view(
    """Patch for ``megatron.core.timers.torch`` (reached only through ``megatron.training``).

    Why: ``Timer.start``/``Timer.stop`` call ``torch.cuda.synchronize()`` when a barrier is
    not requested (``timers.py`` lines 152, 165) and ``Timers._get_elapsed_time_all_ranks``
    allocates with ``device=torch.cuda.current_device()`` (line 303): every timed region of
    ``pretrain`` goes through them.
    How: the CPU view: ``synchronize`` is a no-op (CPU work is complete when it returns),
    ``current_device()`` is the CPU device.
    Upstream reference: megatron-core 0.19.2, ``megatron/core/timers.py``.
    Drop when: upstream synchronises through a device-agnostic API.
    """
)

RERUN_STATE_MACHINE = _view(
    """Patch for ``megatron.core.rerun_state_machine.torch`` (reached only through ``megatron.training``).

    Why: ``RerunStateMachine`` all-reduces its state in ``torch.tensor(..., device='cuda')``
    (``rerun_state_machine.py`` lines 264-268), records ``torch.cuda.current_device()``
    (lines 527-662) and saves and restores ``torch.cuda.get_rng_state()`` /
    ``torch.cuda.set_rng_state()`` around every training step (lines 979, 992).
    How: the CPU view: tensors on the CPU, and the "CUDA" RNG state is the CPU default
    generator's (saving and restoring the same generator twice is harmless: the two saved
    states are the same snapshot).
    Upstream reference: megatron-core 0.19.2, ``megatron/core/rerun_state_machine.py``.
    Drop when: upstream saves the RNG state of the accelerator in use.
    """
)
