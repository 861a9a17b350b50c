"""A registry whose impl differs on one rank: ``JOB_ODD_RANK=N`` gives rank N another impl (a node with another plugin)."""

import os

from fl_patch import register

_ODD = os.environ.get("JOB_ODD_RANK")
_IMPL = "job_impls.divide_other" if _ODD is not None and os.environ.get("RANK") == _ODD else "job_impls.divide"
register(target="megatron.core.utils.divide", impl=_IMPL)
