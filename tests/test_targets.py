"""Target and impl parsing, and FlagScale's method_key (fl_patch.core.paths)."""

from __future__ import annotations

import pytest

from fl_patch import method_key
from fl_patch.core.paths import is_method_target, parse_impl_path, parse_target, parse_vendor

# The seed's table (override-plugin-mechanism.txt, "method_key Generation Rules").
SEED_TABLE = [
    ("megatron.core.optimizer.clip_grads.get_grad_norm_fp32", "clip_grads.get_grad_norm_fp32"),
    (
        "megatron.core.optimizer.optimizer.MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan",
        "MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan",
    ),
    ("megatron.core.optimizer.lr_scheduler.CosineAnnealingLR", "lr_scheduler.CosineAnnealingLR"),
]


@pytest.mark.parametrize(("target", "key"), SEED_TABLE)
def test_method_key_matches_the_seed_table(target: str, key: str) -> None:
    assert method_key(target) == key


def test_method_rule_is_the_capitalised_second_to_last_segment() -> None:
    assert is_method_target("megatron.core.optimizer.optimizer.MixedPrecisionOptimizer.step")
    assert not is_method_target("megatron.core.optimizer.clip_grads.get_grad_norm_fp32")
    assert not is_method_target("megatron.core.optimizer.lr_scheduler.CosineAnnealingLR")


@pytest.mark.parametrize(
    ("bad", "cause"),
    [
        ("", "empty"),
        ("megatron", "name a module and an attribute"),
        (" megatron.core.x", "whitespace"),
        ("megatron.core .x", "whitespace"),
        ("megatron.core.x\n", "whitespace"),
        (".megatron.core", "relative"),
        ("megatron..core", "empty segment"),
        ("megatron.core.", "empty segment"),
        ("megatron.core.1abc", "not a Python identifier"),
        ("megatron.core.a-b", "not a Python identifier"),
        ("megatron.class.x", "keyword"),
        (None, "expected a dotted path string"),
        (42, "expected a dotted path string"),
        (b"megatron.core", "expected a dotted path string"),
    ],
)
def test_malformed_targets_name_the_target_and_the_cause(bad: object, cause: str) -> None:
    with pytest.raises(ValueError, match=cause) as info:
        parse_target(bad)
    assert repr(bad) in str(info.value)


def test_impl_paths_with_and_without_a_colon() -> None:
    assert parse_impl_path("pkg.mod.func") == ("pkg.mod.func", ())
    assert parse_impl_path("pkg.mod:Cls.method") == ("pkg.mod", ("Cls", "method"))
    for bad in ("pkg.mod:", ":func", "a:b:c", "pkg mod", ".pkg"):
        with pytest.raises(ValueError, match="invalid impl"):
            parse_impl_path(bad)


def test_vendors_are_case_insensitive_names() -> None:
    assert parse_vendor("MUSA") == "musa"
    assert parse_vendor(" Default ") == "default"
    for bad in ("", "a b", None, 3, "musa,cpu"):
        with pytest.raises(ValueError, match="invalid vendor"):
            parse_vendor(bad)
