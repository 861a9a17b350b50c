"""A replacement class for ``act_check_megatron``: the seed's pattern, subclassing the original."""

from __future__ import annotations

from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler


class Scheduler(OptimizerParamScheduler):
    pass
