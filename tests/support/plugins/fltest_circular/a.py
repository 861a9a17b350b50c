def f():
    return "upstream"


from fltest_circular import b  # noqa: E402  (the circular import is the point)

CALLS_F_THROUGH_B = b.call_f
