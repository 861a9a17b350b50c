"""A typeguard/beartype-style import hook: a finder put at ``sys.meta_path[0]`` that instruments packages.

Like ``typeguard.install_import_hook(["pkg"])``, it asks ``PathFinder`` for the
spec of a module under the named packages and swaps in its own source loader
(typeguard's ``TypeguardLoader`` rewrites the AST; this one only records what it
loaded). Every other finder, fl_patch's among them, never sees those imports.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

INSTRUMENTED: list[str] = []


class InstrumentingLoader(importlib.machinery.SourceFileLoader):
    def exec_module(self, module: ModuleType) -> None:
        INSTRUMENTED.append(self.name)
        super().exec_module(module)


class InstrumentingFinder(importlib.abc.MetaPathFinder):
    def __init__(self, packages: Sequence[str]) -> None:
        self.packages = tuple(packages)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not any(fullname == p or fullname.startswith(p + ".") for p in self.packages):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = InstrumentingLoader(spec.loader.name, spec.loader.path)
        return spec


def install_import_hook(packages: Sequence[str]) -> InstrumentingFinder:
    finder = InstrumentingFinder(packages)
    sys.meta_path.insert(0, finder)
    return finder
