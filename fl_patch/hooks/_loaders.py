"""Loaders the finder hands to the import system.

``PatchingLoader`` wraps the real loader of a watched module in a
``wrapt.BaseObjectProxy``: every attribute other than ``exec_module`` is the real
loader's (``get_data``, resource readers, ``is_package``), and ``isinstance``
checks against the real loader's class still pass. Its ``exec_module`` runs the
module body, then the observer's patching, all before the importer gets the module.

``SubstituteLoader`` serves a whole-module replacement: the module object the
import system stores under the upstream name is the replacement module itself.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from importlib.machinery import ModuleSpec

import wrapt

from ._observer import ImportObserver

__all__ = ["PatchingLoader", "SubstituteLoader"]


def _point_module_at(module: types.ModuleType, proxy: object, loader: object) -> None:
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
    # sys.modules keeps insertion order: what is inserted from here on started loading
    # while this module body ran (the only modules that can hold early aliases).
    modules_before = len(sys.modules)
    try:
        loader.exec_module(module)  # type: ignore[attr-defined]
    except BaseException:
        observer.exec_failed(module)
        raise
    observer.after_exec(module, modules_before)


class PatchingLoader(wrapt.BaseObjectProxy):  # type: ignore[misc]
    def __init__(self, loader: object, observer: ImportObserver) -> None:
        super().__init__(loader)
        self._self_observer = observer

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        create = getattr(self.__wrapped__, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        _point_module_at(module, self, self.__wrapped__)
        exec_observed(self.__wrapped__, module, self._self_observer)


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
        self._substituted = False

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        module = self._provide()
        if module is not None:
            self._substituted = True
            return module
        if self._fallback is None:
            raise ModuleNotFoundError(f"No module named {self.fullname!r}", name=self.fullname)
        create = getattr(self._fallback, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        if self._substituted:
            return  # the replacement module has already run its own body
        _point_module_at(module, self, self._fallback)
        exec_observed(self._fallback, module, self._observer)

    def __repr__(self) -> str:
        return f"<fl_patch.SubstituteLoader for {self.fullname!r}>"
