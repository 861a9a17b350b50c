"""Loaders the finder hands to the import system.

``PatchingLoader`` wraps the real loader of a watched module in a
``wrapt.BaseObjectProxy``: every attribute other than ``exec_module`` is the real
loader's (``get_data``, resource readers, ``is_package``), and ``isinstance``
checks against the real loader's class still pass. Its ``exec_module`` runs the
module body, then the observer's patching, all before the importer gets the module.
A legacy loader that only has ``load_module`` (PEP 302, still honoured by Python) gets
``LegacyPatchingLoader``, which has only ``load_module`` too, so the import system
keeps calling it the legacy way.

``SubstituteLoader`` serves a whole-module replacement: the module object the
import system stores under the upstream name is the replacement module itself. The
import system stamps the module it gets with the substitute's ``__spec__``; the
replacement gets its own spec back right away, so ``importlib.reload`` of it reloads
the replacement's own source, never upstream code into it.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from typing import Any

import wrapt

from ._observer import ImportObserver

__all__ = ["LegacyPatchingLoader", "PatchingLoader", "SubstituteLoader", "substitute_spec", "wrap_loader"]


def _point_module_at(module: types.ModuleType, proxy: object, loader: Any) -> None:  # Any: a duck-typed loader
    # The import system set __loader__ and __spec__.loader to the proxy; the module body
    # and everyone after it should see the real loader (inspect.getsource, resources).
    if getattr(module, "__loader__", None) is proxy:
        try:
            module.__loader__ = loader
        except AttributeError:
            pass
    spec = getattr(module, "__spec__", None)
    if spec is not None and getattr(spec, "loader", None) is proxy:
        spec.loader = loader


def exec_observed(loader: object, module: types.ModuleType, observer: ImportObserver) -> None:
    observer.before_exec(module)
    # (sys.modules keeps insertion order: what follows this module's own entry started loading
    # while its body ran, the only modules that can hold early aliases; core.bindings.window_items.)
    try:
        loader.exec_module(module)  # type: ignore[attr-defined]
    except BaseException:
        observer.exec_failed(module)
        raise
    observer.after_exec(module)


def wrap_loader(loader: object, observer: ImportObserver) -> Any:  # Any: a proxy standing in for the loader
    """``loader``, observed: its module body is followed by the observer's patching."""
    if isinstance(loader, (PatchingLoader, LegacyPatchingLoader, SubstituteLoader)):
        return loader
    if hasattr(loader, "exec_module"):
        return PatchingLoader(loader, observer)
    if hasattr(loader, "load_module"):
        return LegacyPatchingLoader(loader, observer)
    return loader


class PatchingLoader(wrapt.BaseObjectProxy):
    def __init__(self, loader: object, observer: ImportObserver) -> None:
        super().__init__(loader)
        self._self_observer = observer

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        create = getattr(self.__wrapped__, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        _point_module_at(module, self, self.__wrapped__)
        exec_observed(self.__wrapped__, module, self._self_observer)


class LegacyPatchingLoader:
    """A ``load_module``-only loader, followed by the observer's patching."""

    def __init__(self, loader: object, observer: ImportObserver) -> None:
        self._loader = loader
        self._observer = observer

    def load_module(self, fullname: str) -> types.ModuleType:
        placeholder = types.ModuleType(fullname)
        self._observer.before_exec(placeholder)
        try:
            module = self._loader.load_module(fullname)  # type: ignore[attr-defined]
        except BaseException:
            self._observer.exec_failed(placeholder)
            raise
        self._observer.after_exec(sys.modules.get(fullname, module))
        return sys.modules.get(fullname, module)

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)

    def __repr__(self) -> str:
        return f"<fl_patch.LegacyPatchingLoader of {self._loader!r}>"


class SubstituteLoader:
    """Loads a replacement module under an upstream module's name.

    ``provide`` imports and returns the replacement, or returns None after reporting
    why it could not; then the upstream module loads as usual (``fallback``), or the
    import fails if there is no upstream module.
    """

    def __init__(
        self,
        fullname: str,
        provide: Callable[[], types.ModuleType | None],
        fallback: object | None,
        observer: ImportObserver,
    ) -> None:
        self.fullname = fullname
        self._provide = provide
        self._fallback = fallback
        self._observer = observer
        self._substituted: types.ModuleType | None = None
        self._own_spec: object = None

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        module = self._provide()
        if module is not None:
            self._substituted = module
            self._own_spec = getattr(module, "__spec__", None)
            return module
        if self._fallback is None:
            raise ModuleNotFoundError(f"No module named {self.fullname!r}", name=self.fullname)
        create = getattr(self._fallback, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        if self._substituted is not None:
            if module is self._substituted and self._own_spec is not None:
                module.__spec__ = self._own_spec  # type: ignore[assignment]  # see the module doc
            return  # the replacement module has already run its own body
        _point_module_at(module, self, self._fallback)
        exec_observed(self._fallback, module, self._observer)

    def __repr__(self) -> str:
        return f"<fl_patch.SubstituteLoader for {self.fullname!r}>"


def substitute_spec(
    fullname: str,
    spec: ModuleSpec | None,
    provide: Callable[[], types.ModuleType | None],
    observer: ImportObserver,
) -> ModuleSpec:
    fallback = spec.loader if spec is not None else None
    if isinstance(fallback, (PatchingLoader, LegacyPatchingLoader)):
        fallback = fallback.__wrapped__ if isinstance(fallback, PatchingLoader) else fallback._loader
    substitute = ModuleSpec(
        fullname,
        SubstituteLoader(fullname, provide, fallback, observer),  # type: ignore[arg-type]  # a duck-typed loader
        origin=spec.origin if spec is not None else None,
        is_package=spec is not None and spec.submodule_search_locations is not None,
    )
    if spec is not None and spec.submodule_search_locations is not None:
        substitute.submodule_search_locations = spec.submodule_search_locations
    return substitute
