"""A finder whose loader has only the legacy ``load_module`` (PEP 302), no ``exec_module``.

Python 3.11 still runs such loaders (with an ImportWarning). Old plugin
systems, zip/egg importers and source generators serve modules this way.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Sequence
from importlib.machinery import ModuleSpec

SOURCES = {
    "hostile_legacy_mod": "def f():\n    return 'upstream'\n",
}


class LegacyLoader:
    def load_module(self, fullname: str) -> types.ModuleType:
        if fullname in sys.modules:
            return sys.modules[fullname]
        module = types.ModuleType(fullname)
        module.__loader__ = self
        sys.modules[fullname] = module
        exec(compile(SOURCES[fullname], f"<legacy {fullname}>", "exec"), module.__dict__)
        return module


class LegacyFinder:
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in SOURCES:
            return None
        return importlib.util.spec_from_loader(fullname, LegacyLoader())
