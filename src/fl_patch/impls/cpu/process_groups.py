"""Process groups megatron drops are freed: gloo groups do not pile up over init/destroy cycles.

Why: ``megatron.core.parallel_state.destroy_model_parallel`` (megatron-core 0.19.2,
``parallel_state.py`` lines 2506-2690) sets its module globals to ``None`` and calls
``torch.distributed.destroy_process_group`` only on its own explicit ``*_GLOO`` groups.
Every other group it created with ``create_group`` stays registered in torch's
``distributed_c10d._world`` (which holds it until ``destroy_process_group(group)``). On a
GPU an unused NCCL communicator costs little until first use; a gloo group connects its
pairs at creation and keeps worker threads and sockets for life. On a CPU (gloo, or nccl
mapped to gloo by the CUDA-on-CPU transfer) each ``initialize_model_parallel`` /
``destroy_model_parallel`` cycle at world size 2 left ~20 groups and ~60 threads alive:
Megatron-LM's ``distributed/test_param_and_grad_buffer.py`` reached 1,253 groups and
3,736 threads per rank by its 63rd test and slowed from 6 s to 40-120 s a test (issue 27;
``bench/group_cycles.py`` measures it).

How: :func:`destroy_model_parallel` reads megatron's own record of the groups it created
on this rank (``parallel_state._global_process_group_list``: every ``create_group``
result this rank is a member of) before upstream clears it, runs upstream, and destroys
each of those groups that is still registered with torch and whose backend is gloo at the
*next* call (so at most one cycle's groups are alive beyond megatron's; the reason for the
delay is at the code). The
set comes from megatron, so a group created by anyone else (a user's, a test's
``HyperCommGrid``) is never touched; the default group is not in it (``None`` there).
``destroy_process_group(group)`` of one subgroup is local in torch (it shuts the backend
down and unregisters the group: no collective), so ranks need not agree on the order.
What is not done: NCCL groups are left as upstream leaves them (this pack runs only
without a GPU; freeing them is upstream's choice to make), and a caller that kept a
megatron group past ``destroy_model_parallel`` gets torch's "Invalid process group" on
its next use instead of a live leaked group.

Upstream reference: megatron-core 0.19.2 ``megatron/core/parallel_state.py``
(``create_group``, ``destroy_model_parallel``); torch 2.13
``torch/distributed/distributed_c10d.py`` (``destroy_process_group``).
Drop when: upstream's ``destroy_model_parallel`` destroys the groups it created.
"""

from __future__ import annotations

import sys
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

import fl_patch

__all__ = ["destroy_model_parallel", "get_nccl_options", "megatron_groups", "release_groups"]

_PS = "megatron.core.parallel_state"


def megatron_groups() -> list[Any]:
    """The groups megatron's ``create_group`` made on this rank and has not forgotten (default group excluded)."""
    listed = getattr(sys.modules.get(_PS), "_global_process_group_list", None) or ()
    seen: set[int] = set()
    groups = []
    for group in listed:
        if group is None or group is c10d.GroupMember.WORLD or id(group) in seen:
            continue
        seen.add(id(group))
        groups.append(group)
    return groups


def release_groups(groups: list[Any]) -> int:
    """Destroy each of ``groups`` that torch still has and that runs on gloo; the number destroyed."""
    if not dist.is_initialized():
        return 0  # the whole world was destroyed already: torch freed every group
    released = 0
    for group in groups:
        if c10d._world.pg_map.get(group) is None:
            continue  # megatron destroyed it itself (its *_GLOO groups), or the caller did
        if c10d.get_backend(group) != dist.Backend.GLOO:
            continue
        dist.destroy_process_group(group)
        released += 1
    return released


_dropped: list[Any] = []
"""Groups megatron dropped at the previous ``destroy_model_parallel``, destroyed at the next one."""


def destroy_model_parallel() -> None:
    """Patch for ``megatron.core.parallel_state.destroy_model_parallel``: upstream, then its gloo groups are freed.

    See the module docstring (Why / How / upstream reference / when to drop).
    """
    groups = megatron_groups()
    fl_patch.original(f"{_PS}.destroy_model_parallel")()
    # One call late: a peer may still be finishing its side of a group this rank is done
    # with (the last handshake of a just-created group, the last message of a collective).
    # Closing its sockets then made the peer fail ("Connection closed by peer", measured at
    # world size 2 with no barrier between cycles). By the next call every peer has since
    # built the next cycle's groups with this rank, so it is past every one of these.
    stale = [g for g in _dropped if all(g is not h for h in groups)]
    _dropped[:] = [g for g in groups if c10d._world.pg_map.get(g) is not None]
    release_groups(stale)


def get_nccl_options(pg_name: str, nccl_comm_cfgs: dict) -> Any:
    """Patch for ``megatron.core.parallel_state.get_nccl_options``: no NCCL options where torch has no NCCL.

    Why: for a group named in ``nccl_comm_cfgs`` upstream (``parallel_state.py`` line 181) builds
    ``torch.distributed.ProcessGroupNCCL.Options``; a CPU build of torch has no ``ProcessGroupNCCL``.
    ``validate_args`` puts ``dp_cp`` there for ``--use-torch-fsdp2`` (high-priority streams,
    ``arguments.py`` line 1444), so that run failed at ``initialize_model_parallel`` with
    ``AttributeError: module 'torch.distributed' has no attribute 'ProcessGroupNCCL'``; a
    ``--nccl-communicator-config-path`` file does the same for any group it names.
    How: where torch has no NCCL, None (upstream's answer for a group with no configuration: NCCL's
    defaults); the groups are gloo groups here, which take no NCCL options (the CUDA-on-CPU transfer
    drops ``pg_options`` for the same reason). With NCCL, upstream runs.
    Upstream reference: megatron-core 0.19.2 ``megatron/core/parallel_state.py`` (``get_nccl_options``).
    Drop when: upstream asks for NCCL options only when the group's backend is NCCL.
    """
    if not hasattr(dist, "ProcessGroupNCCL"):
        return None
    return fl_patch.original(f"{_PS}.get_nccl_options")(pg_name, nccl_comm_cfgs)
