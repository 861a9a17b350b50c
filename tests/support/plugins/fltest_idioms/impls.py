"""Class impls written the way a vendor writes them: subclass the upstream class, call ``super()``."""

from __future__ import annotations

from typing import Any

from megatron.core.fusions.fused_bias_gelu import GeLUFunction
from megatron.core.tensor_parallel.layers import ColumnParallelLinear
from megatron.core.transformer.module import GraphableMegatronModule, MegatronModule
from megatron.core.transformer.moe.moe_layer import BaseMoELayer

import fl_patch

BUILT: list[str] = []


class PlainMegatronModule(MegatronModule):
    """Adds nothing: replacing the base of every megatron module must change nothing."""


class PlainGraphableMegatronModule(GraphableMegatronModule):
    """Adds nothing (its subclasses mix it with ABCMeta classes: no metaclass conflict may follow)."""


class CountingColumnParallelLinear(ColumnParallelLinear):
    """Upstream's __init__ calls super(ColumnParallelLinear, self).__init__(): it must not re-enter this one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        BUILT.append(type(self).__name__)


class CountingBaseMoELayer(BaseMoELayer):
    """MoELayer, a subclass defined before the patch, keeps building itself (super(BaseMoELayer, self))."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        BUILT.append("CountingBaseMoELayer")


class DoubledGeLU(GeLUFunction):
    """megatron binds ``bias_gelu_impl = GeLUFunction.apply`` at import: it must reach this forward."""

    calls = 0

    @staticmethod
    def forward(ctx: Any, input: Any, bias: Any) -> Any:
        DoubledGeLU.calls += 1
        upstream = fl_patch.original("megatron.core.fusions.fused_bias_gelu.GeLUFunction.forward")
        return upstream(ctx, input, bias) * 2
