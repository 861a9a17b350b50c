"""Every option with an environment variable twin accepts each form the variable accepts, meaning the same.

``--registry pkg.mod:setup`` was refused though ``FL_PATCH_REGISTRY=pkg.mod:setup`` worked:
the CLI had its own checks. Now both read through ``activation.settings`` (``read_list``,
``switch_value``); these tests generate, for every row of ``fl_patch.config.options`` that has a
flag and a variable, the forms the variable accepts, and compare the ``Settings`` the
option gives with the ``Settings`` the variable gives. A new row without forms here fails.
"""

from __future__ import annotations

import os

import pytest

from fl_patch import cli
from fl_patch.config.options import OPTIONS, Option
from fl_patch.config.settings import _FALSE, _TRUE, ENV, Settings, read_list

# The forms each valued variable accepts (comma lists with spaces and empty items, case, the
# MODULE:FUNCTION form of a registry, a vendor with a dash).
FORMS: dict[str, tuple[str, ...]] = {
    ENV.REGISTRY: ("pkg.mod", "pkg.mod:setup", "a, b.c", "a,,b", " a:setup , b.c ", "a:setup,b:other"),
    ENV.TRIGGERS: ("pkg", "pkg.sub", "a, b", "a,,b"),
    ENV.PREFER: ("cpu", "Cuda", "flaggems,cuda", "npu, cpu", "kunlun-xin", "musa,,cpu"),
    ENV.PACKS: ("all", "none", "cpu", "cpu,flaggems", "ALL", "None"),
    ENV.DISABLE: ("megatron.core.x.f", "Cls.meth,mod.f", "a, b"),
    ENV.REPORT_FILE: ("/tmp/fl-report.jsonl",),
    ENV.COMPARE_JSON: ("/tmp/fl-compare.jsonl",),
    ENV.RANK_CHECK: ("on", "warn", "off", "WARN", "0", "yes"),
}
SWITCH_FORMS = (*sorted(_TRUE | _FALSE), "ON", "False", " yes ")

VALUED = [row for row in OPTIONS if row.flags and row.variable and row.takes_value]
SWITCHES = [row for row in OPTIONS if row.flags and row.variable and row.kind == "switch"]


def _settings_from_option(words: list[str]) -> Settings:
    """The Settings a program started by ``fl-patch words x.py`` reads (the launcher's environment)."""
    options = cli.parse([*words, "x.py"], prog="fl-patch")
    env = dict(options.env)
    for variable, values in options.append.items():
        env[variable] = ",".join(values)
    return Settings.from_environ(env)


def test_every_option_with_a_variable_has_forms_here() -> None:
    assert {row.variable for row in VALUED} <= set(FORMS), "add the new variable's forms to FORMS"


@pytest.mark.parametrize(
    ("row", "form"),
    [(row, form) for row in VALUED for form in FORMS[row.variable]],  # type: ignore[index]
    ids=lambda value: value.flags[0] if isinstance(value, Option) else repr(value),
)
@pytest.mark.parametrize("spelling", ["separate", "equals"])
def test_a_valued_option_accepts_every_form_of_its_variable_and_means_the_same(
    row: Option, form: str, spelling: str
) -> None:
    words = [row.flags[0], form] if spelling == "separate" else [f"{row.flags[0]}={form}"]
    expected = Settings.from_environ({row.variable: form})  # type: ignore[dict-item]
    assert repr(_settings_from_option(words)) == repr(expected)


@pytest.mark.parametrize(
    ("row", "form"),
    [(row, form) for row in SWITCHES for form in SWITCH_FORMS],
    ids=lambda value: value.flags[0] if isinstance(value, Option) else repr(value),
)
def test_a_switch_takes_every_on_or_off_form_of_its_variable(row: Option, form: str) -> None:
    on = form.strip().lower() in _TRUE
    value = row.value if on else ("0" if row.value == "1" else "1")
    expected = Settings.from_environ({row.variable: value})  # type: ignore[dict-item]
    assert repr(_settings_from_option([f"{row.flags[0]}={form}"])) == repr(expected)
    assert repr(_settings_from_option([row.flags[0]])) == repr(Settings.from_environ({row.variable: row.value}))  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("flag", "value", "cause"),
    [
        ("--registry", "pkg mod", "not a dotted module name"),
        ("--registry", "pkg.mod:", "not MODULE or MODULE:FUNCTION"),
        ("--registry", "pkg.mod:a.b", "not MODULE or MODULE:FUNCTION"),
        ("--triggers", "pkg:x", "not a dotted module name"),
        ("--vendor", "np u", "not a vendor name"),
        ("--strict=2", None, "FL_PATCH_STRICT"),
    ],
)
def test_a_malformed_value_is_refused_by_the_option_and_reported_from_the_variable(
    flag: str, value: str | None, cause: str, capsys: pytest.CaptureFixture[str]
) -> None:
    words = [flag] if value is None else [flag, value]
    assert cli.main([*words, "x.py"]) == 2
    err = capsys.readouterr().err
    assert cause in err and "error:" in err
    if value is not None:
        variable = next(row.variable for row in VALUED if row.flags[0] == flag)
        items, problems = read_list(variable, value)  # type: ignore[arg-type]
        assert problems and cause in problems[0] and value.strip() not in items  # the variable says so too


def test_the_registry_function_form_is_read_the_same_from_the_option_and_the_variable() -> None:
    before = dict(os.environ)
    env_settings = Settings.from_environ({ENV.REGISTRY: "pkg.mod:setup"})
    assert env_settings.registry_modules == ("pkg.mod:setup",)
    assert _settings_from_option(["--registry", "pkg.mod:setup"]).registry_modules == ("pkg.mod:setup",)
    assert dict(os.environ) == before  # parsing sets nothing in this process's environment
