"""Which rank this process is, as each launcher says it (torchrun, Slurm, Open MPI, MPICH/PMI).

torchrun sets ``RANK``; ``srun`` sets ``SLURM_PROCID``; Open MPI's ``mpirun`` sets
``OMPI_COMM_WORLD_RANK``; MPICH / Intel MPI (Hydra, PMI) set ``PMI_RANK``; PMIx launchers
``PMIX_RANK``. A process started by one of them knows its rank before it has any process
group, so fl_patch's per-rank output (the exit report, its merged view) reads it here.

``RANK`` is asked first: under ``srun torchrun ...`` a worker has both torchrun's ``RANK``
(its rank in the job) and Slurm's ``SLURM_PROCID`` (the index of the ``srun`` task, the
node's torchrun), and the first is the one that means a rank. Standard library only: the
exit report imports it at interpreter exit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = [
    "LOCAL_RANK_VARIABLES",
    "RANK_VARIABLES",
    "WORLD_VARIABLES",
    "RankInfo",
    "is_elastic_agent",
    "process_rank",
]

# (rank variable, its world-size variable), in the order they are asked.
RANK_VARIABLES: tuple[tuple[str, str], ...] = (
    ("RANK", "WORLD_SIZE"),  # torchrun / torch elastic, veRL's and most Ray worker groups
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI's mpirun / mpiexec
    ("PMIX_RANK", "PMIX_SIZE"),  # PMIx launchers (Open MPI 5's prterun, srun --mpi=pmix)
    ("PMI_RANK", "PMI_SIZE"),  # MPICH / Intel MPI (Hydra), srun --mpi=pmi2
    ("SLURM_PROCID", "SLURM_NTASKS"),  # srun
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),  # MVAPICH2
)
WORLD_VARIABLES = tuple(world for _, world in RANK_VARIABLES)
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


class RankInfo:
    """A process's rank as its launcher gave it: ``rank`` and ``world`` (None: not said), and the variable read."""

    __slots__ = ("local_rank", "rank", "source", "world")

    def __init__(self, rank: int | None, world: int | None, local_rank: int | None, source: str | None) -> None:
        self.rank = rank
        self.world = world
        self.local_rank = local_rank
        self.source = source

    def __repr__(self) -> str:
        return f"RankInfo(rank={self.rank}, world={self.world}, local_rank={self.local_rank}, source={self.source!r})"

    def label(self) -> str:
        """``rank 3 of 8`` (``rank 3 of 8 (SLURM_PROCID)`` when a launcher variable other than ``RANK`` said it)."""
        if self.rank is None:
            return ""
        text = f"rank {self.rank}" + (f" of {self.world}" if self.world is not None else "")
        return text + (f" ({self.source})" if self.source not in (None, "RANK") else "")


# Loaded by torchrun's agent (``torchrun``, ``python -m torch.distributed.run``, ``torch.distributed.launch``), which
# starts the ranks and is none of them; a rank imports it only if it runs an agent itself.
_ELASTIC_AGENT = "torch.distributed.elastic.agent.server.local_elastic_agent"


def is_elastic_agent() -> bool:
    """Whether this process is torchrun's agent: the launcher of a job's local ranks, not a rank."""
    return _ELASTIC_AGENT in sys.modules and process_rank().rank is None


def _integer(value: str | None) -> int | None:
    try:
        return int(value) if value is not None and value.strip() else None
    except ValueError:
        return None


def process_rank(environ: Mapping[str, str] | None = None) -> RankInfo:
    """This process's rank, world size and local rank from the first launcher variable set (see ``RANK_VARIABLES``)."""
    env = os.environ if environ is None else environ
    local = next((v for v in (_integer(env.get(name)) for name in LOCAL_RANK_VARIABLES) if v is not None), None)
    for rank_name, world_name in RANK_VARIABLES:
        rank = _integer(env.get(rank_name))
        if rank is not None:
            return RankInfo(rank, _integer(env.get(world_name)), local, rank_name)
    return RankInfo(None, None, local, None)
