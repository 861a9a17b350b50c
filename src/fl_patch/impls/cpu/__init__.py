"""The CPU pack: upstream megatron-core trains on a machine with no accelerator.

Registered for ``vendor="cpu"``: chosen where no accelerator is detected, or with
``MG_FL_PREFER=cpu``. Verified on megatron-core 0.19.2 (``_compat``); on another
release it says so once.

- ``registry.py``: every patch, as ``register()`` calls with strings (the engine imports
  it as the pack; nothing else is imported until a target's module loads).
- ``torch_view.py``: the CPU view of torch (real torch, with CUDA devices, streams,
  synchronisation and the CUDA RNG mapped to the CPU), in two flavours: no CUDA device
  (megatron-core) and one CUDA device that is the CPU (for code that insists on a GPU).
- ``torch_names.py``: one documented view per megatron-core module whose name ``torch``
  it replaces.
- ``rng.py``, ``optimizer.py``, ``fusions.py``, ``paged_stash_ops.py``: function, method
  and module patches.
- ``training_registry.py`` (called by ``registry.py``): the ``megatron.training`` patches,
  so that Megatron-LM's ``pretrain_gpt.py`` trains (``docs/training_pack.md``), with
  ``training_torch_names.py`` (views for megatron.training modules),
  ``training_functions.py`` (FlagScale's training targets, RNG fidelity, ``Tensor.cuda``,
  ``typing.override``) and ``training_defaults.py`` (the parser's CPU defaults).

- ``cuda_on_cpu_registry.py`` (called by ``registry.py``): the CUDA-on-CPU transfer for the
  code around megatron (``torch.cuda.*``, ``device="cuda"``, ``.cuda()``/``.to("cuda")``,
  NCCL, autocast, the grad scaler, Transformer Engine layer specs -> local specs), on
  unless ``FL_PATCH_CUDA_ON_CPU=0`` (``docs/cuda_on_cpu.md``), with its impls in
  ``cuda_on_cpu.py`` and ``cuda_on_cpu_megatron.py`` and the stand-ins it shares with the
  views in ``cuda_stand_ins.py``; and, always, fixes for megatron-core without flash-attn /
  Transformer Engine (``cuda_on_cpu_megatron.py``).

Each impl's docstring says why it is needed (the upstream line that assumes CUDA), how it
works, the upstream reference, and when it can be dropped.
"""
