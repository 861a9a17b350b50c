"""A class with __slots__: ``Point.x`` is a member descriptor, the storage of every instance's x."""


class Point:
    __slots__ = ("x", "y")

    def __init__(self, x: object, y: object) -> None:
        self.x = x
        self.y = y
