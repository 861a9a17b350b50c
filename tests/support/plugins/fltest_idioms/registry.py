"""Registrations over megatron's idioms (tests/core/test_classes.py)."""

from fl_patch import register

M = "megatron.core"
register(f"{M}.transformer.module.MegatronModule", "fltest_idioms.impls.PlainMegatronModule")
register(f"{M}.transformer.module.GraphableMegatronModule", "fltest_idioms.impls.PlainGraphableMegatronModule")
register(f"{M}.tensor_parallel.layers.ColumnParallelLinear", "fltest_idioms.impls.CountingColumnParallelLinear")
register(f"{M}.transformer.moe.moe_layer.BaseMoELayer", "fltest_idioms.impls.CountingBaseMoELayer")
register(f"{M}.fusions.fused_bias_gelu.GeLUFunction", "fltest_idioms.impls.DoubledGeLU")
