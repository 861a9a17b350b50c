"""A registry whose impl differs on one rank: ``JOB_ODD_RANK=N`` gives rank N another impl (a node with another plugin).

The rank is the launcher's (torchrun's ``RANK``, mpirun's ``OMPI_COMM_WORLD_RANK``...).
"""

import os

from fl_patch import register
from fl_patch.host.ranks import process_rank

_ODD = os.environ.get("JOB_ODD_RANK")
_IMPL = "job_impls.divide_other" if _ODD is not None and str(process_rank().rank) == _ODD else "job_impls.divide"
register(target="megatron.core.utils.divide", impl=_IMPL)
