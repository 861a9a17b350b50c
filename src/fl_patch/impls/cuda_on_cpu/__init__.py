"""The pack ``cuda_on_cpu``: unmodified CUDA code around megatron runs on a machine with no GPU (``docs/cuda_on_cpu.md``).

Vendor ``cpu``, on by default where no accelerator is found (``FL_PATCH_CUDA_ON_CPU=0`` or a
``FL_PATCH_PACKS`` list without it turns it off). It builds on the CPU pack's stand-ins for CUDA's
runtime objects (``cpu/cuda_stand_ins.py``), so that a stream, an event or the "CUDA" RNG behaves the
same whether megatron reached it through its CPU view of torch or the code around it through the transfer.

- ``registry.py``: what it patches (one ``PatchDoc`` per concern).
- ``transfer.py``: the torch-level impls (devices, streams, events, NCCL -> gloo, autocast, the grad scaler).
- ``local_specs.py``: Transformer Engine layer-spec functions -> megatron-core's local specs, where
  neither TE nor the TE-compatible layers (pack ``te``) are there.

Each impl's docstring gives Why (the upstream line), How, the upstream reference and when it can be dropped.
"""
