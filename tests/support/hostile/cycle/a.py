def f() -> str:
    return "a.f upstream"
