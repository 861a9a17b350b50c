"""Targets of every kind, with known signatures."""

from __future__ import annotations


def greet(name: str, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


def farewell(name: str) -> str:
    return f"bye {name}"


class Greeter:
    def __init__(self, prefix: str = "hi") -> None:
        self.prefix = prefix

    def hello(self, name: str) -> str:
        return f"{self.prefix} {name}"

    @staticmethod
    def shout(text: str) -> str:
        return text.upper()

    @classmethod
    def make(cls, prefix: str = "hey") -> Greeter:
        return cls(prefix)

    @property
    def loud(self) -> bool:
        return False


LIMIT = 3
