def f():
    return "upstream"
