"""The registry: which impls are registered for which targets, and for which vendors.

It is plain data. Nothing here imports a target or an impl: registering costs a
dict insert, so a registry module of a hundred ``register()`` calls can be imported
at interpreter start-up. The import hook asks ``watched_names`` (a frozenset, swapped
whole on each change, so reading it needs no lock) whether a module being imported
could hold a registered target.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ._errors import FlPatchWarning
from ._targets import method_key, parse_impl_path, parse_target, parse_vendor

__all__ = ["REGISTRY", "Registration", "Registry", "Selection"]


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


@dataclass(frozen=True)
class Selection:
    """Which registration of one target runs, and why the others do not."""

    chosen: Registration | None
    vendors: tuple[str, ...]
    disabled: bool


class Registry:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._by_target: dict[str, dict[str, Registration]] = {}
        self._targets_by_module: dict[str, list[str]] = {}
        self.watched_names: frozenset[str] = frozenset()
        self._listeners: list[Callable[[list[Registration]], None]] = []
        self._held = threading.local()  # registrations a loading source made, not yet announced

    def add_listener(self, listener: Callable[[list[Registration]], None]) -> None:
        """``listener`` gets each batch of new registrations (a registry module's, at once)."""
        self._listeners.append(listener)

    def register(
        self,
        target: str,
        impl: object,
        vendor: str = "default",
        *,
        source: str = "?",
        create: bool = False,
        where: tuple[str, int] | None = None,
    ) -> Registration:
        if impl is None:
            raise ValueError(f"fl_patch: invalid impl None for target {target!r}")
        if isinstance(impl, str):
            parse_impl_path(impl)
        registration = Registration(
            target=target, impl=impl, vendor=parse_vendor(vendor), source=source, create=bool(create), where=where
        )
        with self._lock:
            by_vendor = self._by_target.setdefault(registration.target, {})
            previous = by_vendor.get(registration.vendor)
            by_vendor[registration.vendor] = registration
            if previous is None:
                self._index(registration.parts)
        if previous is not None and previous.impl_name != registration.impl_name:
            message = (
                f"fl_patch: {registration.target} (vendor {registration.vendor!r}) registered twice: "
                f"{registration.impl_name} (from {registration.source}) replaces "
                f"{previous.impl_name} (from {previous.source})"
            )
            if where is None:
                warnings.warn(message, FlPatchWarning, stacklevel=4)
            else:
                warnings.warn_explicit(message, FlPatchWarning, filename=where[0], lineno=where[1])
        held: list[Registration] | None = getattr(self._held, "pending", None)
        if held is not None:
            held.append(registration)
            return registration
        self._announce([registration])
        return registration

    def _announce(self, registrations: list[Registration]) -> None:
        # Outside the lock: a listener may import (late application), and imports
        # must never run under our lock (another thread's import hook needs it).
        if registrations:
            for listener in list(self._listeners):
                listener(registrations)

    @contextmanager
    def atomically(self) -> Iterator[None]:
        """Registrations made inside count only if the block finishes without error.

        A registry module that fails half-way contributes nothing: half a plugin (a
        patched forward without its patched backward, say) is worse than none.
        """
        outer = getattr(self._held, "pending", None)
        pending: list[Registration] = []
        self._held.pending = pending
        try:
            yield
        except BaseException:
            self._held.pending = outer
            self._discard(pending)
            raise
        self._held.pending = outer
        if outer is not None:
            outer.extend(pending)
        else:
            self._announce(pending)

    def _discard(self, registrations: list[Registration]) -> None:
        with self._lock:
            for registration in registrations:
                by_vendor = self._by_target.get(registration.target, {})
                if by_vendor.get(registration.vendor) is registration:
                    del by_vendor[registration.vendor]
                if not by_vendor:
                    self._by_target.pop(registration.target, None)
                    # (the watched-name index may keep the prefixes: watching more is harmless)

    def _index(self, parts: tuple[str, ...]) -> None:
        # Every proper prefix may be the module that owns the target; the full path may be
        # a submodule replaced whole. The hook watches all of them.
        names = set(self.watched_names)
        target = ".".join(parts)
        for end in range(1, len(parts)):
            prefix = ".".join(parts[:end])
            names.add(prefix)
            self._targets_by_module.setdefault(prefix, []).append(target)
        names.add(target)
        self.watched_names = frozenset(names)

    def targets_under(self, module_name: str) -> list[str]:
        """Targets that may live in ``module_name`` (or in one of its submodules)."""
        with self._lock:
            return list(self._targets_by_module.get(module_name, ()))

    def is_target(self, name: str) -> bool:
        return name in self._by_target

    def targets(self) -> list[str]:
        with self._lock:
            return list(self._by_target)

    def registrations(self, target: str | None = None) -> list[Registration]:
        with self._lock:
            if target is not None:
                return list(self._by_target.get(target, {}).values())
            return [reg for by_vendor in self._by_target.values() for reg in by_vendor.values()]

    def vendors(self) -> set[str]:
        with self._lock:
            return {vendor for by_vendor in self._by_target.values() for vendor in by_vendor}

    def select(self, target: str, vendors: Iterable[str], disabled: frozenset[str]) -> Selection:
        vendors = tuple(vendors)
        with self._lock:
            by_vendor = dict(self._by_target.get(target, {}))
        if not by_vendor:
            return Selection(None, vendors, False)
        any_reg = next(iter(by_vendor.values()))
        if target in disabled or any_reg.method_key in disabled:
            return Selection(None, vendors, True)
        for vendor in vendors:
            if vendor in by_vendor:
                return Selection(by_vendor[vendor], vendors, False)
        return Selection(None, vendors, False)

    def clear(self) -> None:
        with self._lock:
            self._by_target.clear()
            self._targets_by_module.clear()
            self.watched_names = frozenset()

    def after_fork_in_child(self) -> None:
        self._lock = threading.RLock()


# The process's one registry: register(), the sources and the engine all use it.
REGISTRY = Registry()
