"""Property-based tests (hypothesis): target parsing, method_key, install/uninstall round trips."""

from __future__ import annotations

import keyword
import sys
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fl_patch
from fl_patch.activation import install as _activation
from fl_patch.core import classes
from fl_patch.core.paths import parse_target

identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True).filter(lambda s: not keyword.iskeyword(s))


@given(st.lists(identifiers, min_size=2, max_size=8))
def test_valid_paths_parse_back_and_key_is_the_last_two_segments(parts: list[str]) -> None:
    target = ".".join(parts)
    assert parse_target(target) == tuple(parts)
    assert fl_patch.method_key(target) == f"{parts[-2]}.{parts[-1]}"


@given(st.one_of(st.text(max_size=40), st.integers(), st.none(), st.binary(max_size=10)))
def test_any_input_parses_exactly_or_raises_value_error(value: object) -> None:
    try:
        parts = parse_target(value)
    except ValueError as exc:
        assert repr(value) in str(exc)  # the message names the bad input
        return
    assert isinstance(value, str) and ".".join(parts) == value and len(parts) >= 2
    assert all(part.isidentifier() and not keyword.iskeyword(part) for part in parts)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_register_accepts_or_rejects_up_front_never_later(value: str) -> None:
    _activation._reset_for_tests()
    try:
        fl_patch.register(value, "fltest_broken.usable.impl")
    except ValueError:
        assert fl_patch.report() == []
    else:
        assert [r.target for r in fl_patch.report()] == [value]
    finally:
        _activation._reset_for_tests()


# (target, impl) pairs on real megatron-core 0.19.2, one per kind of target.
CATALOG = [
    ("megatron.core.optimizer.clip_grads.get_grad_norm_fp32", "fltest_plugin.impls.get_grad_norm_fp32"),
    ("megatron.core.utils.divide", "fltest_plugin.impls.divide"),
    ("megatron.core.transformer.utils.attention_mask_func", "fltest_plugin.impls.attention_mask_func"),
    (
        "megatron.core.optimizer.optimizer.MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan",
        "fltest_plugin.impls.unscale_main_grads_and_check_for_nan",
    ),
    (
        "megatron.core.optimizer.optimizer.MegatronOptimizer._extract_common_per_param_step",
        "fltest_plugin.impls.extract_common_per_param_step",
    ),
    (
        "megatron.core.optimizer.distrib_optimizer.DistributedOptimizer._is_distopt_quantized_param",
        "fltest_plugin.impls.is_distopt_quantized_param",
    ),
    (
        "megatron.core.optimizer_param_scheduler.OptimizerParamScheduler",
        "fltest_plugin.impls.WarmupStableDecayScheduler",
    ),
    ("megatron.core.tensor_parallel.random._MODEL_PARALLEL_RNG_TRACKER_NAME", "fltest_plugin.impls.RNG_TRACKER_NAME"),
    ("megatron.core.tensor_parallel.random.torch", "fltest_plugin.impls.CPU_DEVICE"),
    ("megatron.core.utils.fltest_created_name", "fltest_plugin.impls.divide"),
]


def _snapshot() -> dict[tuple[str, str], object]:
    """Every module-level name in megatron, and every class attribute of megatron classes."""
    state: dict[tuple[str, str], object] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("megatron.") or not isinstance(module, types.ModuleType):
            continue
        for attr, value in list(vars(module).items()):
            state[(name, attr)] = value
            if isinstance(value, type) and value.__module__ == name:
                for cls_attr, cls_value in list(vars(value).items()):
                    if cls_attr == "__new__" and _passes_through(value, cls_value):
                        continue  # what an undone redirect leaves (core/classes.py undo): counted as absent
                    state[(f"{name}.{attr}", cls_attr)] = cls_value
    return state


def _passes_through(cls: type, new: object) -> bool:
    """fl_patch's ``__new__`` left on a class after its redirect was undone: it calls what the class inherits."""
    function = new.__func__ if isinstance(new, staticmethod) else new
    return hasattr(function, "__fl_patch_redirect__") and classes.redirects_to(cls) is None


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(CATALOG), min_size=1, max_size=len(CATALOG), unique=True), st.integers(1, 3))
def test_install_uninstall_round_trip_restores_every_original(megatron_core, monkeypatch, pairs, cycles) -> None:
    for name, value in (
        ("FL_PATCH_PACKS", "none"),
        ("FL_PATCH_ENTRY_POINTS", "0"),
        ("FL_PATCH_FLAGSCALE", "0"),
        ("FL_PATCH_RANK_CHECK", "off"),  # fl_patch's own registration (job/) left out: only the generated pairs
    ):
        monkeypatch.setenv(name, value)
    _activation._reset_for_tests()
    before = _snapshot()
    try:
        for target, impl in pairs:
            fl_patch.register(target, impl, create=target.endswith("fltest_created_name"))
        for _ in range(cycles):
            fl_patch.install()
            applied = [r for r in fl_patch.report() if r.status is fl_patch.Status.APPLIED]
            assert len(applied) == len(pairs), [(r.target, r.detail) for r in fl_patch.report()]
            fl_patch.uninstall()
        after = _snapshot()
        changed = [key for key in before.keys() | after.keys() if before.get(key, None) is not after.get(key, None)]
        assert changed == []
    finally:
        _activation._reset_for_tests()


@pytest.mark.skipif(not hasattr(sys.modules["os"], "fork"), reason="needs os.fork")
def test_fork_after_install_keeps_the_patches(megatron_core, engine) -> None:
    import os

    import fltest_plugin.impls as impls
    from megatron.core import utils

    fl_patch.register("megatron.core.utils.divide", "fltest_plugin.impls.divide")
    fl_patch.install()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and leave without running pytest's teardown
        try:
            ok = (
                utils.divide.__code__ is impls.divide.__code__
                and fl_patch.is_installed()
                and utils.divide(4, 2) == ("patched", 2)
            )
            # The engine's locks were renewed after fork: registering still works.
            fl_patch.register("megatron.core.utils.fltest_child_name", impls.divide, create=True)
            ok = ok and getattr(getattr(utils, "fltest_child_name", None), "__code__", None) is impls.divide.__code__
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(read)
