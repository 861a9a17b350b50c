"""The registry: the registered targets, each with its registrations, and an index for the hook.

It is plain data. Nothing here imports a target or an impl: registering costs a
dict insert and a walk down a trie, so a registry module of a hundred ``register()``
calls can be imported at interpreter start-up, and 16,000 of them cost linear time.

Each target is one ``Target`` object (``core.target``), which owns its registrations and
everything that happens to them. The index is a trie of dotted segments: a module
being imported is *watched* when its name is a path in the trie (a package that may
own a target, or a target replaced whole). Memory is linear in the targets' length,
and reading it needs no lock: a node is complete before it is linked in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fl_patch.core.errors import warn
from fl_patch.core.paths import parse_impl_path, parse_vendor
from fl_patch.core.registration import PatchDoc, Registration, describe_impl
from fl_patch.core.target import CHANGES, Target

__all__ = ["Registration", "Registry", "describe_impl"]


class _Node:
    __slots__ = ("children", "target")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.target: Target | None = None  # the target whose path ends here


class Registry:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._targets: dict[str, Target] = {}
        self._root = _Node()
        self._owner_names: list[str] | None = None  # owner_names(), until a new target is indexed
        # watches(), by module name, until a new target is indexed: the finder asks for every
        # import, and walking the trie splits the name (an allocation each time).
        self._watch_cache: dict[str, bool] = {}
        self._listeners: list[Callable[[list[Registration]], None]] = []
        self._held = threading.local()  # registrations a loading source made, not yet committed

    def add_listener(self, listener: Callable[[list[Registration]], None]) -> None:
        """``listener`` gets each batch of new registrations (a registry module's, at once)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ registering
    def register(
        self,
        target: str,
        impl: object,
        vendor: str = "default",
        *,
        source: str = "?",
        create: bool = False,
        where: tuple[str, int] | None = None,
        requires: str | None = None,
        doc: PatchDoc | None = None,
    ) -> Registration:
        if impl is None:
            raise ValueError(f"fl_patch: invalid impl None for target {target!r}")
        if isinstance(impl, str):
            parse_impl_path(impl)
        registration = Registration(
            target=target,
            impl=impl,
            vendor=parse_vendor(vendor),
            source=source,
            create=bool(create),
            where=where,
            requires=requires,
            doc=doc,
        )
        held: list[Registration] | None = getattr(self._held, "pending", None)
        if held is not None:
            held.append(registration)  # committed (indexed, announced) when its source has loaded
            return registration
        self._commit([registration])
        return registration

    def _commit(self, registrations: list[Registration], *, yield_to_existing: bool = False) -> None:
        replaced: list[tuple[Registration, Registration]] = []
        with self._lock:
            if yield_to_existing:
                # A shipped pack loads at the first megatron import, after the user's registry
                # modules: the user's registration for the same target and vendor still wins,
                # as it did when packs loaded first and the user's replaced theirs.
                registrations = [r for r in registrations if not self._has(r.target, r.vendor)]
            for registration in registrations:
                target = self._targets.get(registration.target)
                if target is None:
                    target = self._targets[registration.target] = Target(registration.target, registration.parts)
                    self._index(target)
                previous = target.add(registration)
                if previous is not None and not _same_impl(previous.impl, registration.impl):
                    replaced.append((previous, registration))
        for previous, registration in replaced:
            _warn_replaced(previous, registration)
        # Outside the lock: a listener may import (late application), and imports must
        # never run under our lock (another thread's import hook may be waiting for it).
        if registrations:
            for listener in list(self._listeners):
                listener(registrations)

    def _has(self, target: str, vendor: str) -> bool:
        found = self._targets.get(target)
        return found is not None and vendor in found.vendors()

    @contextmanager
    def atomically(self, *, yield_to_existing: bool = False) -> Iterator[None]:
        """Registrations made inside count only if the block finishes.

        ``yield_to_existing``: those for a target and vendor registered already are dropped
        (a shipped pack's, loaded after the user's registries).

        A registry module that fails half-way contributes nothing: half a plugin (a
        patched forward without its patched backward, say) is worse than none. Until
        the block ends its registrations are neither indexed nor applied.
        """
        outer = getattr(self._held, "pending", None)
        pending: list[Registration] = []
        self._held.pending = pending
        try:
            yield
        finally:
            self._held.pending = outer
        if outer is not None:
            outer.extend(pending)
        else:
            self._commit(pending, yield_to_existing=yield_to_existing)

    def pending(self) -> list[Registration]:
        """The registrations made so far inside this thread's ``atomically`` block (what a failure there drops)."""
        return list(getattr(self._held, "pending", None) or ())

    def _index(self, target: Target) -> None:
        node = self._root
        for segment in target.parts:
            child = node.children.get(segment)
            if child is None:
                child = _Node()
                node.children[segment] = child  # linked only once complete: readers need no lock
            node = child
        node.target = target
        self._owner_names = None
        self._watch_cache = {}

    # ------------------------------------------------------------------ reading
    def watches(self, name: str) -> bool:
        """Whether a module called ``name`` may own a target or be one (no lock: see the module doc)."""
        cache = self._watch_cache
        known = cache.get(name)
        if known is not None:
            return known
        node = self._root.children.get(name.partition(".")[0])
        if node is not None and "." in name:
            for segment in name.split(".")[1:]:
                node = node.children.get(segment)
                if node is None:
                    break
        cache[name] = watched = node is not None
        return watched

    def targets_under(self, module_name: str) -> list[Target]:
        """Targets below ``module_name`` (that module, or one of its submodules, owns them)."""
        node: _Node | None = self._root
        for segment in module_name.split("."):
            node = node.children.get(segment) if node is not None else None
        if node is None:
            return []
        found: list[Target] = []
        stack = list(node.children.values())
        while stack:  # iterative: a pathological target may be thousands of segments deep
            current = stack.pop()
            if current.target is not None:
                found.append(current.target)
            stack.extend(current.children.values())
        return found

    def owner_names(self) -> list[str]:
        """Every module name that may own a target, or is one (for catching up on missed imports), sorted."""
        cached = self._owner_names
        if cached is not None:
            return cached
        names: list[str] = []
        stack = [(name, node) for name, node in self._root.children.items()]
        while stack:
            name, node = stack.pop()
            if node.children:
                names.append(name)
                stack.extend((f"{name}.{segment}", child) for segment, child in node.children.items())
            elif node.target is not None:
                names.append(name)  # a whole-module target is a module name too
        names.sort()
        self._owner_names = names
        return names

    def get(self, name: str) -> Target | None:
        return self._targets.get(name)

    def targets(self) -> list[Target]:
        with self._lock:
            return list(self._targets.values())

    def registrations(self, target: str | None = None) -> list[Registration]:
        with self._lock:
            if target is not None:
                found = self._targets.get(target)
                return found.registrations() if found is not None else []
            return [reg for found in self._targets.values() for reg in found.registrations()]

    def vendors(self) -> set[str]:
        with self._lock:
            return {vendor for found in self._targets.values() for vendor in found.vendors()}

    def clear(self) -> None:
        with self._lock:
            self._targets.clear()
            CHANGES.bump()
            self._root = _Node()
            self._owner_names = None
            self._watch_cache = {}

    def after_fork_in_child(self) -> None:
        self._lock = threading.RLock()
        self._held = threading.local()


def _same_impl(a: object, b: object) -> bool:
    """One impl registered again (the same object, or the same dotted path): not a replacement.

    Decided by identity, never by how the impls print: two ``functools.partial`` objects
    or two lambdas print alike, and the second silently winning is exactly what the
    warning is for.
    """
    return a is b or (isinstance(a, str) and isinstance(b, str) and a.replace(":", ".") == b.replace(":", "."))


def _origin(registration: Registration) -> str:
    where = f", {registration.where[0]}:{registration.where[1]}" if registration.where else ""
    return f"from {registration.source}{where}"


def _warn_replaced(previous: Registration, registration: Registration) -> None:
    alike = " (a different object that prints alike)" if registration.impl_name == previous.impl_name else ""
    message = (
        f"fl_patch: {registration.target} (vendor {registration.vendor!r}) registered twice: "
        f"{registration.impl_name}{alike} ({_origin(registration)}) replaces "
        f"{previous.impl_name} ({_origin(previous)}): the later one wins"
    )
    warn(message, where=registration.where, stacklevel=5)
