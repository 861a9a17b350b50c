"""The tree's own view of its registry (run by tests/compat/test_flagscale_tree.py under ``python -m fl_patch -m pytest``).

FlagScale's tests check its internal API this way; with fl_patch active they must pass unchanged.
"""

from megatron.plugin import decorators


def test_register_fills_the_trees_own_lazy_registry() -> None:
    assert decorators._lazy_registry["clip_grads.get_grad_norm_fp32"]["default"].startswith("megatron.plugin.")
    assert set(decorators._lazy_registry["filesystem_async.preload_tensors"]) == {"kunlunxin"}


def test_eager_override_and_dispatch_still_work() -> None:
    @decorators.override("MyClass", "method")
    def default_method() -> str:
        return "default"

    assert decorators._plugin_registry["MyClass.method"]["default"] is default_method
    assert decorators.get_override_method("MyClass.method")() == "default"


def test_overridable_keeps_the_original_as_wrapped() -> None:
    def original() -> str:
        return "original"

    wrapped = decorators.overridable(original)
    assert wrapped() == "original" and wrapped.__wrapped__ is original


def test_a_new_registration_is_seen_by_get_override_method() -> None:
    decorators.register("megatron.core.foo.bar", "megatron.plugin.optimizer.clip_grads.get_grad_norm_fp32")
    assert decorators.get_override_method("foo.bar").__name__ == "get_grad_norm_fp32"
