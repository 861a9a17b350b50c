"""Registrations in the form FlagScale's own side writes them (targets in megatron.training;
the last one in FlagScale's key form: the module, then ``module_basename.func``)."""

from megatron.plugin.decorators import register

register(
    target="megatron.training.dist_signal_handler.get_device",
    impl="megatron.plugin_flagscale.dist_signal_handler.get_device",
)
register(
    target="megatron.training.dist_signal_handler.get_device",
    impl="megatron.plugin_flagscale.npu_plugin.get_device",
    vendor="npu",
)
register(
    target="megatron.training.utils.get_device_arch_version",
    impl="megatron.plugin_flagscale.npu_plugin.get_device_arch_version",
    vendor="npu",
)
register(
    target="megatron.training.initialize.initialize._compile_dependencies",
    impl="megatron.plugin_flagscale.npu_plugin._compile_dependencies",
    vendor="npu",
)
