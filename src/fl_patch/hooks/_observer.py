"""What the import hook calls back into (the engine implements it)."""

from __future__ import annotations

import types
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from typing import Protocol

__all__ = ["ImportObserver"]


class ImportObserver(Protocol):
    """What the hook calls back into (the engine implements it)."""

    def watches(self, fullname: str) -> bool: ...

    def substitute_for(
        self, fullname: str, real_spec: ModuleSpec | None
    ) -> Callable[[], types.ModuleType | None] | None: ...

    def before_exec(self, module: types.ModuleType) -> None: ...

    def after_exec(self, module: types.ModuleType) -> None: ...

    def exec_failed(self, module: types.ModuleType) -> None: ...

    def meta_path_changed(self) -> None: ...
