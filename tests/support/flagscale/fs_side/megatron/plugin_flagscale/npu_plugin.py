"""NPU impls: what an Ascend machine answers (here only for --check and the vendor choice)."""

import torch


def get_device(local_rank=None):
    return torch.device("npu" if local_rank is None else f"npu:{local_rank}")


def get_device_arch_version():
    return 0


def _compile_dependencies():
    return None
