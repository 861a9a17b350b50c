"""A registration: one ``register()`` call, as plain data.

Its own module so that the registry (which holds registrations), a target (which applies
them) and applying (which records them) all import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fl_patch.core.gates import Gate, parse_gate
from fl_patch.core.paths import method_key, parse_target

__all__ = ["PatchDoc", "Registration", "describe_impl", "shipped"]


@dataclass(frozen=True)
class PatchDoc:
    """Why a patch exists, the way vllm-ascend's patch index says it: one per registration (or shared
    by a group of them), read by ``fl-patch --list --why`` and the generated ``docs/patches.md``."""

    why: str  # what upstream does that does not work here (the failure, in one or two sentences)
    how: str  # what the impl does instead
    upstream: str  # the upstream file (and release) it replaces, and the upstream PR or issue where one exists
    remove_when: str  # the condition under which the patch can go (an upstream release, a fix landing, ...)

    def as_dict(self) -> dict[str, str]:
        return {"why": self.why, "how": self.how, "upstream": self.upstream, "remove_when": self.remove_when}


def shipped(source: str) -> bool:
    """Whether a registration's ``source`` is fl_patch itself (a pack's registry, the rank check), not a plugin's."""
    return source == "fl_patch" or source.startswith("fl_patch.")


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
    requires: str | None = None  # a version gate, "megatron-core>=0.19,<0.21" (core/gates.py)
    doc: PatchDoc | None = None  # why / how / upstream / when to remove (packs give one for each)
    parts: tuple[str, ...] = field(init=False)
    method_key: str = field(init=False)
    impl_name: str = field(init=False)
    gate: Gate | None = field(init=False)

    def __post_init__(self) -> None:
        self.parts = parse_target(self.target)
        self.method_key = method_key(self.target)
        self.impl_name = describe_impl(self.impl)
        self.gate = parse_gate(self.requires, self.target)

    def for_this_version(self) -> bool:
        """False when its version gate excludes the installed release (then it is never applied)."""
        return self.gate is None or self.gate.allows()
