"""GPU-only packages a megatron module imports unguarded: a stand-in, so that a CPU run goes on.

Why: each megatron release adds modules that do ``import triton`` at top level, with no
``try``: 0.18's ``moe/paged_stash.py``, 0.19's ``moe/ops/paged_stash.py``, main's
``ssm/ops/common/causal_conv1d_varlen.py``... On a machine without Triton (a CPU-only
torch) each one stops every import that reaches it (``import megatron.core``,
``megatron.training.models.hybrid``), although its kernels run only for a feature a CPU
run does not use. Patching each such module by name is always one release behind.

How (one rule, for modules that do not exist yet): a finder placed *last* in
``sys.meta_path`` (so it is asked only when no real finder has the package) answers for a
package of :data:`GPU_ONLY` when, and only when, the import would otherwise fail a
megatron module:

- the module running the ``import`` statement is under ``megatron``;
- no megatron import on the stack is guarded (inside a ``try`` whose handler catches
  ``ImportError``): a module that guards ``import triton`` (or imports a module that
  does) keeps upstream's behaviour, its ``HAVE_TRITON = False`` fallback included. A
  guard outside megatron (a user's ``try: import megatron.training ...``) does not count:
  it asks whether megatron imports, which the stand-in is there to make true;
- it is a real ``import`` statement, not ``importlib.util.find_spec("triton")`` (a
  feature probe keeps its answer: not installed).

The stand-in lets the module body run: ``@triton.jit``, ``@triton.autotune(...)``,
``tl.constexpr`` annotations, ``triton.Config(...)`` all work while the importing module
is still being imported. After that, calling anything of it (launching a kernel,
``triton.cdiv(...)``) raises :class:`GpuOnlyPackageMissing`, naming the package, what was
called and the module that imported it. ``--check`` lists every stand-in served
(:func:`served`).

Not a stand-in for a package that is installed (it is never asked), nor for importers
outside megatron (a user's ``import triton`` fails as usual).
"""

from __future__ import annotations

import functools
import os
import sys
import types
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from typing import Any

from fl_patch.core.errors import FlPatchError
from fl_patch.runtime import RUNTIME

# (ast is imported when a stand-in is first asked for: the patching finder imports this module
# in every process, and one that never meets a GPU-only import should not pay for it.)

__all__ = ["GPU_ONLY", "GpuOnlyFinder", "GpuOnlyPackageMissing", "importer_of", "release", "served"]

GPU_ONLY: tuple[str, ...] = ("triton", "cupy", "cuda")
"""Top-level packages that exist only with a GPU toolchain (``cuda`` is cuda-python)."""

STAND_IN_VERSION = "0.0.0+flpatch.standin"
_GUARDS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
_SKIP_FILES = ("<frozen importlib", "importlib/__init__.py", "importlib\\__init__.py")


class GpuOnlyPackageMissing(FlPatchError, ImportError):
    """A kernel of a GPU-only package was called on a machine that does not have the package.

    An ``ImportError`` too: code that catches the missing package's ``ImportError`` at the
    call site (a fallback path) still takes it.
    """


def release(fullname: str) -> None:
    """Take the stand-ins out of ``sys.modules`` unless ``fullname`` is one of their own imports.

    The patching finder, first in ``sys.meta_path``, calls this at every import (its
    ``every_import``; activation passes it): nothing to do unless stand-ins are in ``sys.modules`` (``RUNTIME.gpu_only_live``) (the
    importer keeps its bindings; an unguarded import that runs again is served again).
    """
    live = RUNTIME.gpu_only_live
    if not live:
        return
    root = fullname.partition(".")[0]
    if root in live:
        return  # `import triton.language`: the parent must stay until the statement is done
    for name in live:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            if isinstance(sys.modules.get(key), _StandInModule):
                del sys.modules[key]
    live.clear()


def served() -> dict[str, list[str]]:
    """Package -> megatron modules that imported it and got the stand-in, in this process."""
    return {name: list(importers) for name, importers in RUNTIME.gpu_only_served.items()}


# ------------------------------------------------------------------------------------------ the stand-in
def _initializing(module_name: str) -> bool:
    module = sys.modules.get(module_name)
    if module is None:
        return True  # its body is running (the entry is removed again if it fails)
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


class _Absent:
    """Any name of a missing GPU-only package: usable while its importer loads, raises when called after."""

    __slots__ = ("_fl_importer", "_fl_name")
    _fl_importer: str  # (the slots' types: __getattr__ answers every other name)
    _fl_name: str

    def __init__(self, name: str, importer: str) -> None:
        object.__setattr__(self, "_fl_name", name)
        object.__setattr__(self, "_fl_importer", importer)

    def __getattr__(self, name: str) -> _Absent:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Absent(f"{self._fl_name}.{name}", self._fl_importer)

    def __getitem__(self, key: object) -> _Absent:  # kernel[grid](...)
        return _Absent(f"{self._fl_name}[...]", self._fl_importer)

    def __call__(self, *args: object, **kwargs: object) -> _Absent:
        # Who calls decides, not who imported first: the stand-in is one module in sys.modules,
        # shared by every megatron module that imports the package.
        caller = sys._getframe(1).f_globals.get("__name__")
        caller = caller if isinstance(caller, str) else "?"
        package = self._fl_name.split(".")[0]
        if not _initializing(caller):
            raise GpuOnlyPackageMissing(
                f"fl_patch: {self._fl_name} was called by {caller}, but {package!r} is not installed "
                f"(a GPU-only package; first imported by {self._fl_importer}). fl_patch let megatron's "
                f"unguarded `import {package}` succeed with a stand-in so that runs that never call its "
                f"kernels work; this one does: install {package} or turn off the feature that needs it."
            )
        # Import time (the caller's module body is running): a decorator (@triton.jit,
        # @triton.autotune(...)) or triton.Config(...). Keep the decorated function's name.
        importers = RUNTIME.gpu_only_served.setdefault(package, [])
        if caller not in importers and (caller == "megatron" or caller.startswith("megatron.")):
            importers.append(caller)
        if len(args) == 1 and not kwargs and isinstance(args[0], _Absent):
            return _Absent(f"{self._fl_name}({args[0]._fl_name})", caller)  # stacked decorators
        if len(args) == 1 and not kwargs and callable(args[0]) and hasattr(args[0], "__qualname__"):
            return _Absent(f"{self._fl_name}({args[0].__qualname__})", caller)
        return _Absent(f"{self._fl_name}(...)", caller)

    def __mro_entries__(self, bases: tuple[object, ...]) -> tuple[type, ...]:
        return (object,)  # class K(triton.runtime.KernelInterface): ... still defines K

    def __repr__(self) -> str:
        return f"<fl_patch stand-in {self._fl_name} (not installed; imported by {self._fl_importer})>"


class _StandInModule(types.ModuleType):
    def __init__(self, name: str, importer: str) -> None:
        super().__init__(name, f"fl_patch stand-in: {name.split('.', maxsplit=1)[0]} is not installed (GPU-only)")
        self.__path__: list[str] = []  # a package: `import triton.language as tl` works
        # Release checks at import time (main's ssm/ops/mamba2: `version.parse(triton.__version__)
        # >= "2.2.0"`): older than any real release, so a feature test picks the oldest path.
        self.__version__ = STAND_IN_VERSION
        self._fl_importer = importer

    def __getattr__(self, name: str) -> _Absent:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Absent(f"{self.__name__}.{name}", self._fl_importer)


class _StandInLoader:
    def __init__(self, importer: str) -> None:
        self.importer = importer

    def create_module(self, spec: ModuleSpec) -> types.ModuleType:
        return _StandInModule(spec.name, self.importer)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


# ------------------------------------------------------------------------------------------ the finder
class GpuOnlyFinder:
    """Last in ``sys.meta_path``: serves :class:`_StandInModule` under the rule in the module doc."""

    def __init__(self, packages: Sequence[str] = GPU_ONLY) -> None:
        self.packages = frozenset(packages)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> ModuleSpec | None:
        root = fullname.partition(".")[0]
        if root not in self.packages:
            return None
        parent = sys.modules.get(root)
        if fullname != root:
            # A submodule: only of a stand-in we served (a real package's submodules are its own).
            if not isinstance(parent, _StandInModule):
                return None
            return ModuleSpec(fullname, _StandInLoader(parent._fl_importer), is_package=True)  # type: ignore[arg-type]  # duck-typed loader
        importer = _unguarded_megatron_importer(root)
        if importer is None:
            return None
        RUNTIME.gpu_only_served.setdefault(root, [])
        if importer not in RUNTIME.gpu_only_served[root]:
            RUNTIME.gpu_only_served[root].append(importer)
        if root not in RUNTIME.gpu_only_live:
            RUNTIME.gpu_only_live.append(root)
        return ModuleSpec(fullname, _StandInLoader(importer), is_package=True)  # type: ignore[arg-type]  # duck-typed loader


_FL_PATCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the fl_patch package directory


def _unguarded_megatron_importer(package: str) -> str | None:
    """The megatron module whose unguarded ``import package`` is running now, if nothing above it guards."""
    frame: types.FrameType | None = sys._getframe(1)
    importer: str | None = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_SKIP_FILES[0]) or filename.endswith(_SKIP_FILES[1:]):
            frame = frame.f_back
            continue
        if filename.startswith(_FL_PATCH_DIR):
            # fl_patch's own frames (the loader, --check's import of each target's module) are
            # not upstream's fallbacks: what they catch says nothing about the module's intent.
            frame = frame.f_back
            continue
        is_import, guarded = _line_kind(filename, frame.f_lineno)
        name = frame.f_globals.get("__name__")
        in_megatron = isinstance(name, str) and (name == "megatron" or name.startswith("megatron."))
        if importer is None:
            if not is_import or not in_megatron:
                return None  # not an import statement (a find_spec probe), or not megatron's
            importer = name
        if guarded and in_megatron:
            # Megatron code up the stack handles the ImportError: upstream's fallback stays. (A
            # guard in the user's script is a probe for megatron itself, not for triton: megatron
            # importing is what it asks, so it does not count.)
            return None
        frame = frame.f_back
    return importer


def _line_kind(filename: str, line: int) -> tuple[bool, bool]:
    """(``line`` is in an import statement, ``line`` is inside a ``try`` that catches ImportError)."""
    found = _statement_lines(filename, line)
    if found is None:
        found = _lines(filename)  # the statement could not be cut out: the whole file, once
    return found.get(line, (False, False))


def _statement_lines(filename: str, line: int) -> dict[int, tuple[bool, bool]] | None:
    """``_lines`` for the top-level statement holding ``line`` only (None when it cannot be cut out).

    Parsing each importer's whole file cost about a second of CPU at megatron's import (33 files:
    every ``try: import triton``): the top-level statement around the import (the ``try`` block, or
    the function or class it is in) is all the answer needs, and is a few lines.
    """
    import linecache

    source = linecache.getlines(filename)
    if not source or not 0 < line <= len(source):
        return None
    start = line - 1
    while start > 0 and not _starts_top_level(source[start]):
        start -= 1
    end = line
    while end < len(source) and not _starts_top_level(source[end]):
        end += 1
    return _snippet_lines(filename, start, "".join(source[start:end]))


def _starts_top_level(text: str) -> bool:
    """A line that begins a module-level statement (not a continuation, a handler or a decorator's def)."""
    return bool(text[:1].strip()) and text[:1] not in "#)]}@" and not text.startswith(_CLAUSES)


_CLAUSES = ("except", "else", "elif", "finally")


@functools.lru_cache(maxsize=1024)
def _snippet_lines(filename: str, start: int, snippet: str) -> dict[int, tuple[bool, bool]] | None:
    import ast

    try:
        tree = ast.parse(snippet, filename=filename)
    except (SyntaxError, ValueError):
        return None  # cut in the wrong place (a string spanning lines at column 0): the whole file instead
    return {start + line: kind for line, kind in _marks(tree).items()}


@functools.lru_cache(maxsize=512)
def _lines(filename: str) -> dict[int, tuple[bool, bool]]:
    import ast

    try:
        with open(filename, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=filename)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return {}
    return _marks(tree)


def _marks(tree: Any) -> dict[int, tuple[bool, bool]]:
    import ast

    lines: dict[int, tuple[bool, bool]] = {}

    def mark(node: ast.AST, is_import: bool, guarded: bool) -> None:
        start = getattr(node, "lineno", None)
        if start is None:
            return
        for line in range(start, (getattr(node, "end_lineno", None) or start) + 1):
            was_import, was_guarded = lines.get(line, (False, False))
            lines[line] = (was_import or is_import, was_guarded or guarded)

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mark(node, True, guarded)
            return
        if isinstance(node, ast.stmt) and guarded:
            mark(node, False, True)  # importlib.import_module(...) inside a guarded try
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            catches = any(_catches_import_error(h) for h in node.handlers)  # type: ignore[attr-defined]
            for child in node.body:  # type: ignore[attr-defined]
                visit(child, guarded or catches)
            for part in (*node.handlers, *node.orelse, *node.finalbody):  # type: ignore[attr-defined]
                visit(part, guarded)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return lines


def _catches_import_error(handler: Any) -> bool:
    import ast

    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        (isinstance(n, ast.Name) and n.id in _GUARDS) or (isinstance(n, ast.Attribute) and n.attr in _GUARDS)
        for n in names
    )


# ------------------------------------------------------------------------------------------ for --check
def importer_of(exc: BaseException) -> str | None:
    """The innermost module in ``exc``'s traceback that is not importlib's: the one whose import failed."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        name = tb.tb_frame.f_globals.get("__name__")
        if not filename.startswith(_SKIP_FILES[0]) and isinstance(name, str) and not name.startswith("importlib"):
            found = name
        tb = tb.tb_next
    return found
