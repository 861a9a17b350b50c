def f() -> str:
    return "upstream"
