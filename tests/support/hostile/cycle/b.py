def g() -> str:
    return "b.g upstream"
