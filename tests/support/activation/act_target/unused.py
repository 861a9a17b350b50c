"""A module with a registered target that the test programs never import."""


def never(x: int) -> int:
    return x
