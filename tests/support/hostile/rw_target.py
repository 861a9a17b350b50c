"""A test-helper module that pytest rewrites (``pytest.register_assert_rewrite("hostile.rw_target")``)."""


def f() -> str:
    return "upstream"


def check(value: object) -> None:
    assert value == "patched"
