"""A registration: one ``register()`` call, as plain data.

Its own module so that the registry (which holds registrations), a target (which applies
them) and applying (which records them) all import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fl_patch.core.paths import method_key, parse_target

__all__ = ["Registration", "describe_impl"]


def describe_impl(impl: object) -> str:
    """A short, stable name for an impl, for messages and reports."""
    if isinstance(impl, str):
        return impl
    module = getattr(impl, "__module__", None)
    name = getattr(impl, "__qualname__", None) or getattr(impl, "__name__", None)
    if isinstance(module, str) and isinstance(name, str):
        return f"{module}.{name}"
    if isinstance(name, str):
        return name
    return f"<{type(impl).__name__} object>"


@dataclass(eq=False)
class Registration:
    """One ``register()`` call: replace ``target`` by ``impl`` when ``vendor`` is chosen."""

    target: str
    impl: object
    vendor: str
    source: str = "?"
    create: bool = False
    where: tuple[str, int] | None = None  # file and line of the register() call
    parts: tuple[str, ...] = field(init=False)
    method_key: str = field(init=False)
    impl_name: str = field(init=False)

    def __post_init__(self) -> None:
        self.parts = parse_target(self.target)
        self.method_key = method_key(self.target)
        self.impl_name = describe_impl(self.impl)
