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


# ------------------------------------------ FlagScale's FlagScale-side key form (issue 25)
def test_a_target_naming_its_module_twice_is_flagscales_key_form(engine, megatron_core) -> None:
    """FlagScale's ``plugin_flagscale/override_registry.py`` writes
    ``megatron.training.initialize.initialize._compile_dependencies``: the module, then FlagScale's
    ``module_basename.func`` key. It resolves to the module's function, in the engine and in the
    static drift check alike, and the record says how."""
    from pathlib import Path

    import megatron.core.utils as utils

    import fl_patch
    from fl_patch.diagnostics.drift import open_source, resolve

    upstream = utils.divide

    def divide(numerator: int, denominator: int) -> tuple[str, int]:
        return ("impl", upstream(numerator, denominator))

    fl_patch.register("megatron.core.utils.utils.divide", divide)
    fl_patch.install()
    assert utils.divide(6, 3) == ("impl", 2)
    (record,) = [r for r in fl_patch.report() if r.target == "megatron.core.utils.utils.divide"]
    assert record.status is fl_patch.Status.APPLIED
    assert "FlagScale's key form: utils.divide in megatron.core.utils is divide" in record.detail
    fl_patch.uninstall()
    assert utils.divide is upstream

    site = Path(utils.__file__).resolve().parents[2]  # the directory holding megatron/core
    found, why = resolve(open_source(str(site)), "megatron.core.utils.utils.divide")
    assert found is not None and found.kind == "function", why
    assert "FlagScale's key form" in found.note


def test_a_module_with_an_attribute_of_its_own_name_keeps_the_path() -> None:
    from fl_patch.core.missing import strip_repeated_module_name

    assert strip_repeated_module_name("a.initialize", ("initialize", "f"), lambda name: False) == ("f",)
    # initialize.py that defines initialize(): initialize.initialize.f is an attribute of that object
    assert strip_repeated_module_name("a.initialize", ("initialize", "f"), lambda name: name == "initialize") is None
    assert strip_repeated_module_name("a.initialize", ("f",), lambda name: False) is None
    assert strip_repeated_module_name("a.utils", ("initialize", "f"), lambda name: False) is None
