"""The CPU pack: upstream megatron-core trains on a machine with no accelerator.

Registered for ``vendor="cpu"``: chosen where no accelerator is detected, or with
``MG_FL_PREFER=cpu``. Verified on the releases of ``fl_patch.impls._compat``; on another
release it says so once.

- ``registry.py``: every patch, as ``register()`` calls with strings and a ``PatchDoc`` each
  (``register_pack``, the pack's entry in ``fl_patch.impls.PACKS``): megatron-core, megatron.training
  (Megatron-LM's ``pretrain_gpt.py``, ``docs/training_pack.md``), what a training script hits outside
  megatron, and the shared packs ``te`` and ``without_te`` for vendor ``cpu``.
- ``torch_view.py``: the CPU view of torch (real torch, with CUDA devices, streams,
  synchronisation and the CUDA RNG mapped to the CPU), in two flavours: no CUDA device
  (megatron-core) and one CUDA device that is the CPU (for code that insists on a GPU).
- ``torch_names.py``, ``training_torch_names.py``: one documented view per module whose name
  ``torch`` it replaces (megatron-core; megatron.training and the two core modules only it reaches).
- ``cuda_stand_ins.py``, ``cuda_names.py``: CUDA's runtime objects as the CPU stands them in, and the
  torch names they cover; shared with the CUDA-on-CPU transfer (pack ``cuda_on_cpu``).
- ``rng.py``, ``optimizer.py``, ``fusions.py``, ``rope.py``, ``te_version.py``, ``process_groups.py``,
  ``moe.py``, ``paged_stash_ops.py``, ``without_extensions.py``: megatron-core patches;
  ``training_functions.py``, ``training_defaults.py``: megatron.training patches.

Each impl's docstring says why it is needed (the upstream line that assumes CUDA), how it
works, the upstream reference, and when it can be dropped.
"""
