def f():
    return "patched"
