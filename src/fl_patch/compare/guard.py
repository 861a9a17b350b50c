"""The guard around upstream's original (and the impl's second run): no collective, no write into the program.

A ``TorchDispatchMode``: every aten and c10d operation of the code it surrounds passes through
``__torch_dispatch__`` first, forward and backward alike (the autograd engine carries the mode
to its threads), so the guard sees an operation *before* it runs and can refuse it.

- **A collective is never run a second time.** ``torch.distributed``'s collectives and point-to-point
  calls (``all_reduce``, ``all_gather_into_tensor``, ``barrier``, ``send``, the functional
  collectives) reach the dispatcher as ``c10d::*`` / ``_c10d_functional::*`` operations. The
  first one aborts the run before it communicates: one rank running an extra collective that its
  peers never join would hang the job. The target is then "not compared: it communicates". In a
  job of one process (world size 1, or no process group) they are let through: there is no peer
  to wait for, and a collective of one is a local copy.
- **The program's tensors are never written.** An operation whose schema marks an argument as
  written (``add_``, ``copy_``, ``out=``) on a storage the program holds (``capture.ProgramState``:
  the call's arguments, ``self``'s parameters, buffers and gradients, an optimizer's state) aborts
  the run before the write. The target is then "not compared: it writes state the program holds".

The abort is a ``BaseException`` (not an ``Exception``): upstream code that wraps a collective in
``try/except Exception`` does not swallow it; once aborted, every later operation aborts again.
What the guard cannot see: communication outside ``torch.distributed`` (a vendor library's own
NCCL/HCCL calls, a file, a socket) and process-group creation (a store rendezvous); writes by a
kernel that does not go through the dispatcher (a Triton kernel given a program tensor). Both are
said in ``docs/compare.md``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fl_patch.compare.capture import storage_key

__all__ = ["Aborted", "Communicates", "Guard", "WritesProgramState"]


def _alone() -> bool:
    """A job of one process: its collectives have no peer to wait for, so running one again cannot hang."""
    try:
        import torch.distributed as dist

        return not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1
    except Exception:  # noqa: BLE001
        return False


_COLLECTIVE_NAMESPACES = frozenset({"c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd"})


class Aborted(BaseException):
    """The guard stopped the run of an original before it could do something the program would see."""


class Communicates(Aborted):
    """The run reached a torch.distributed collective or point-to-point operation."""


class WritesProgramState(Aborted):
    """The run was about to write in place into a tensor the program holds."""


class Guard(TorchDispatchMode):
    """Refuse collectives and in-place writes into ``protected`` storages while active."""

    def __init__(self, protected: set[tuple[str, int]]) -> None:
        super().__init__()
        self.protected = protected
        self.aborted: Aborted | None = None
        self.alone = _alone()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.aborted is not None:
            raise self.aborted
        if func.namespace in _COLLECTIVE_NAMESPACES and not self.alone:
            self.aborted = Communicates(f"{func} (torch.distributed) was reached")
            raise self.aborted
        if func._schema.is_mutable and self.protected:
            self._check_writes(func, args, kwargs)
        return func(*args, **kwargs)

    def _check_writes(self, func: Any, args: Any, kwargs: Any) -> None:
        for index, argument in enumerate(func._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = args[index] if index < len(args) else kwargs.get(argument.name)
            for tensor in value if isinstance(value, list | tuple) else (value,):
                if not isinstance(tensor, torch.Tensor):
                    continue
                key = storage_key(tensor)
                if key is not None and key in self.protected:
                    shape = "x".join(map(str, tensor.shape)) or "scalar"
                    self.aborted = WritesProgramState(
                        f"{func} would write into a {str(tensor.dtype).removeprefix('torch.')}[{shape}] tensor "
                        "the program holds"
                    )
                    raise self.aborted
