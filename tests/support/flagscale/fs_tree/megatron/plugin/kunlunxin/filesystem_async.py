"""Kunlunxin impls that hand over to upstream through ``Target.__wrapped__``, as FlagScale's do."""

from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync

CALLS: list[str] = []


def prepare_write_data(self, plan, planner):
    CALLS.append("prepare_write_data")
    return FileSystemWriterAsync.prepare_write_data.__wrapped__(self, plan, planner)


def preload_tensors_kunlunxin(write_buckets, non_blocking=True):
    CALLS.append("preload_tensors")
    return FileSystemWriterAsync.preload_tensors.__wrapped__(write_buckets, non_blocking=False)
