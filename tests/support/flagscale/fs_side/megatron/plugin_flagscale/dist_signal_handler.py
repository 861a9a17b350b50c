"""The default vendor's get_device: the backend's device, whatever the backend (not only nccl/gloo)."""

import torch


def get_device(local_rank=None):
    backend = torch.distributed.get_backend()
    kind = "cuda" if backend == "nccl" else "cpu"
    return torch.device(kind if local_rank is None or kind == "cpu" else f"{kind}:{local_rank}")
