"""Impls for ``act_check_registry``: each name says how it fits its target."""

from __future__ import annotations

from act_target.mod import Greeter


def greet_ok(name, punctuation="!"):
    return name + punctuation


def greet_renamed(who, punctuation="!"):  # greet(name="x") would fail
    return who + punctuation


def greet_narrow(name):  # greet("x", "?") would fail
    return name


def greet_other_default(name, punctuation="?"):  # runs, but callers relying on "!" get "?"
    return name + punctuation


def greet_forwarding(*args, **kwargs):  # accepts anything, binds nothing by name
    return args, kwargs


def hello_ok(this, name):  # the receiver's name does not matter
    return f"{this} {name}"


STATIC_HELLO = staticmethod(lambda name: name)  # a method target would lose its self


def shout_ok(text):
    return text


def shout_with_self(self, text):  # a staticmethod receives no self
    return text


def make_ok(cls, prefix="hey"):
    return cls(prefix)


def loud_ok(self):
    return True


class GreeterOk(Greeter):
    pass


class NotAGreeter:
    pass


class GreeterNeedsPrefix(Greeter):
    def __init__(self, prefix):  # Greeter() would fail
        super().__init__(prefix)


LIMIT_OK = 5
LIMIT_TEXT = "five"
