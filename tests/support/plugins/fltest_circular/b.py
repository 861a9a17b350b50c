from fltest_circular.a import f  # bound while a is half-initialised


def call_f():
    return f()
