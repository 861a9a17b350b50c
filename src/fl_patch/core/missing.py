"""Why a target is not where its registration says, and FlagScale's key form.

"has no attribute" alone sends a vendor into the Megatron sources. The usual causes are
few, and each is told apart here from the module itself and its source:

- **FlagScale's key form**: ``pkg.mod.func`` naming a method without ``self`` of a class
  in ``pkg.mod`` (FlagScale keys staticmethods by module and function name:
  ``filesystem_async.preload_tensors`` is ``FileSystemWriterAsync.preload_tensors``).
  When exactly one class of the module has it, the target resolves there
  (``resolve_key_form``); when several do, the message lists them. FlagScale also keys a
  module-level function by ``module_basename.func``, and its FlagScale-side tree writes
  targets as ``pkg.mod`` + that key (``megatron.training.initialize.initialize._compile_dependencies``):
  a path whose first attribute repeats the module's own name, when the module has no such
  attribute, resolves without the repetition (``strip_repeated_module_name``).
- **defined only with an optional dependency**: the name is bound only under
  ``if HAVE_TE:`` (or another guard, or a ``try: import`` block) that is false here. When
  it is bound to ``None`` in the guard's other branch it is *not* missing: that ``None``
  is what a vendor fills in, so it is patched and the record says so (``upstream_none``).
  Likewise a ``unittest.mock`` object upstream put there for a package that is not installed
  (megatron-core: ``te = MagicMock()`` without Transformer Engine, so ``class TELinear(te.pytorch.Linear)``
  is a mock, not a class): it does nothing real, so no impl is measured against it
  (``mock_stand_in``).
- **renamed**: a close name exists in the module or the class (``difflib``); reported,
  never patched, because a renamed API usually changed in other ways too.
- **a re-export**: the name is there, but bound to a function or class another megatron module
  defines (``rotary_pos_embedding.apply_rotary_pos_emb`` is ``rope_utils``'s). Patching it reaches
  what imports that name from there afterwards, not code that reaches it through where it is defined
  (that module's own calls, modules importing it from there), which keeps upstream's (the engine rebinds a replaced object's other names only when the
  target is its home). Found, patched as registered, and said, with the defining target (``reexported_from``).

Source is read with ``ast`` from the module's file, once per file.
"""

from __future__ import annotations

import ast
import difflib
import functools
import inspect
import sys
import types

from fl_patch.core.resolve import Resolved, describe, resolve_in

__all__ = [
    "dependency_guard",
    "locate",
    "mock_stand_in",
    "reexported_from",
    "resolve_key_form",
    "strip_repeated_module_name",
    "unusable",
    "upstream_mock",
    "upstream_none",
    "why_missing",
]


def _selfless(raw: object) -> bool:
    """A class member FlagScale keys by module name: static, class, or a plain function without ``self``."""
    if isinstance(raw, (staticmethod, classmethod)):
        return True
    if isinstance(raw, types.FunctionType):
        try:
            params = list(inspect.signature(raw).parameters)
        except (TypeError, ValueError):
            return False
        return not params or params[0] != "self"
    return False


def _key_form_classes(module: object, name: str) -> list[str]:
    module_name = getattr(module, "__name__", None)
    found = []
    for class_name, value in list(vars(module).items()):
        if isinstance(value, type) and value.__module__ == module_name and _selfless(vars(value).get(name)):
            found.append(class_name)
    return sorted(found)


def resolve_key_form(module: object, attr_path: tuple[str, ...]) -> tuple[tuple[str, ...], str] | None:
    """``(Class, func)`` and a note, when ``module.func`` is FlagScale's key form of one class's member."""
    if len(attr_path) != 1 or attr_path[0] in vars(module):
        return None
    classes = _key_form_classes(module, attr_path[0])
    if len(classes) != 1:
        return None
    return (classes[0], attr_path[0]), f"FlagScale's key form: resolves to {classes[0]}.{attr_path[0]}"


def strip_repeated_module_name(module_name: str, attr_path: tuple[str, ...], has: object) -> tuple[str, ...] | None:
    """``attr_path`` without its first segment when that segment only repeats the module's own
    name (``initialize`` in ``megatron.training.initialize`` + ``initialize._compile_dependencies``,
    FlagScale's ``module_basename.func`` key appended to the module), else None.

    ``has(name)`` says whether the module defines ``name``: a module that really has an
    attribute of its own name (a function ``initialize`` in ``initialize.py``) keeps the path.
    """
    base = module_name.rpartition(".")[2]
    if len(attr_path) >= 2 and attr_path[0] == base and not has(base):  # type: ignore[operator]
        return attr_path[1:]
    return None


def locate(module: types.ModuleType, attr_path: tuple[str, ...]) -> tuple[Resolved, tuple[str, ...], str]:
    """``resolve_in`` plus FlagScale's key forms: (what is there, the path used, a note or '').

    Raises ``AttributeError`` when a segment before the last is missing.
    """
    note = ""
    stripped = strip_repeated_module_name(module.__name__, attr_path, lambda name: name in vars(module))
    if stripped is not None:
        note = f"FlagScale's key form: {'.'.join(attr_path)} in {module.__name__} is {'.'.join(stripped)}"
        attr_path = stripped
    resolved = resolve_in(module, attr_path)
    if not resolved.exists:
        key_form = resolve_key_form(module, attr_path)
        if key_form is not None:
            return resolve_in(module, key_form[0]), key_form[0], "; ".join(filter(None, (note, key_form[1])))
    return resolved, attr_path, note


def unusable(module: types.ModuleType, attr_path: tuple[str, ...], resolved: Resolved, version_note: str) -> str | None:
    """Why the target cannot be patched as found (it is missing), else None."""
    if not resolved.exists:
        return f"{describe(resolved.holder)} has no attribute {resolved.name!r}{version_note}" + why_missing(
            module, attr_path
        )
    return None


def upstream_none(module: types.ModuleType, attr_path: tuple[str, ...], resolved: Resolved) -> str | None:
    """The note for a target upstream sets to ``None`` for want of an optional dependency, else None.

    Exactly what a vendor fills in (issue 30: ``fused_a2a.fused_dispatch`` without DeepEP on
    every non-NVIDIA machine): it is installed, and the record says so once. Upstream's own
    "X is not installed" check (``if fused_dispatch is None``) then sees the vendor's impl;
    a flag it checks (``HAVE_DEEP_EP``) is the vendor's to register too.
    """
    if not resolved.exists or resolved.raw is not None:
        return None
    guard = dependency_guard(module, attr_path)
    if guard is None:
        return None
    return "upstream had None here (" + guard.removeprefix("it is None here: ") + ")"


def mock_stand_in(raw: object) -> bool:
    """Whether ``raw`` is a ``unittest.mock`` object: upstream's stand-in for a package that is not installed.

    Such a value accepts every call and returns more mocks; nothing works through it, so what
    replaces it is not held to its "signature" (``*args, **kwargs``) or its "class". Asked only
    when ``unittest.mock`` is loaded (else nothing can be a mock): fl_patch never imports it for this.
    """
    mock = sys.modules.get("unittest.mock")
    return mock is not None and isinstance(raw, mock.NonCallableMock)


def reexported_from(module: types.ModuleType, attr_path: tuple[str, ...], resolved: Resolved) -> str | None:
    """The defining target of a module-level function or class another megatron module defines, else None.

    Only where the defining module binds the same object under the same name (that target reaches
    megatron's callers). A method of a re-exported class is not one: the class object is shared, so
    patching its method reaches every caller wherever the class is named.
    """
    if len(attr_path) != 1 or not resolved.exists or not isinstance(resolved.holder, types.ModuleType):
        return None
    raw = resolved.raw
    if not isinstance(raw, (types.FunctionType, type)):
        return None
    home = getattr(raw, "__module__", None)
    if not isinstance(home, str) or home == module.__name__ or not home.startswith("megatron."):
        return None
    defining = sys.modules.get(home)
    if defining is None or vars(defining).get(attr_path[0]) is not raw:
        return None
    return f"{home}.{attr_path[0]}"


def upstream_mock(resolved: Resolved) -> str | None:
    """The note for a target upstream bound to a ``unittest.mock`` stand-in, else None."""
    if not resolved.exists or not mock_stand_in(resolved.raw):
        return None
    return "upstream had a unittest.mock stand-in here (a package it needs is not installed)"


def why_missing(module: object, attr_path: tuple[str, ...]) -> str:
    """What to add to "has no attribute X": the likely cause, or ''."""
    name = attr_path[-1]
    if len(attr_path) == 1:
        classes = _key_form_classes(module, name)
        if len(classes) > 1:
            members = ", ".join(f"{c}.{name}" for c in classes)
            return f"; as FlagScale's key form it names several classes' members ({members}): name the class"
    guard = dependency_guard(module, attr_path)
    if guard is not None:
        return f"; {guard}"
    close = _close_names(module, attr_path)
    if close:
        return f"; renamed? close names there: {', '.join(close)} (not patched: check the new API first)"
    return ""


def _close_names(module: object, attr_path: tuple[str, ...]) -> list[str]:
    holder: object = module
    for segment in attr_path[:-1]:
        holder = getattr(holder, segment, None)
        if holder is None:
            return []
    name = attr_path[-1]
    candidates: dict[str, str] = {}
    names = dir(holder) if isinstance(holder, type) else list(vars(holder))
    for candidate in names:
        candidates.setdefault(candidate, candidate)
    if not isinstance(holder, type):  # also the members of classes defined there, by their own name
        module_name = getattr(module, "__name__", None)
        for class_name, value in list(vars(holder).items()):
            if isinstance(value, type) and value.__module__ == module_name:
                for member in vars(value):
                    if not member.startswith("__"):
                        candidates.setdefault(member, f"{class_name}.{member}")
    matches = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.75)
    return [candidates[m] for m in matches if m != name]


def dependency_guard(module: object, attr_path: tuple[str, ...]) -> str | None:
    """How the source binds ``attr_path`` only when an optional dependency is there, if it does."""
    if len(attr_path) != 1:
        return None
    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py"):
        return None
    guards = _bindings(path).get(attr_path[0])
    if not guards:
        return None
    real = [g for g in guards if not g[2]]  # bindings to something other than None
    if not real or not all(g[0] for g in real):
        return None  # bound unconditionally somewhere: not a dependency question
    test = real[0][0]
    assert test is not None  # every real binding has a guard (checked above)
    what = _dependency_name(test)
    value = vars(module).get(attr_path[0], _ABSENT)
    state = "is None here" if value is None else "is not defined here"
    return f"it {state}: upstream defines it only when {test} ({what})"


_ABSENT = object()


def _dependency_name(test: str) -> str:
    if "HAVE_TE" in test or "transformer_engine" in test:
        return "Transformer Engine, which is not installed"
    return "an optional dependency that is missing here"


@functools.lru_cache(maxsize=64)
def _bindings(path: str) -> dict[str, list[tuple[str | None, bool, bool]]]:
    """name -> [(guard test or None, in the guard's else/except branch, bound to None)] at module level."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, list[tuple[str | None, bool, bool]]] = {}

    def visit(body: list[ast.stmt], guard: str | None, other_branch: bool) -> None:
        for node in body:
            if isinstance(node, ast.If):
                test: str | None = f"`{ast.unparse(node.test)}`"
                visit(node.body, test, False)
                visit(node.orelse, test, True)
            elif isinstance(node, ast.Try):
                imports = [n for n in node.body if isinstance(n, (ast.Import, ast.ImportFrom))]
                test = f"`{ast.unparse(imports[0])}` succeeds" if imports else guard
                visit(node.body, test, False)
                for handler in node.handlers:
                    visit(handler.body, test, True)
                visit(node.orelse, test, False)
                visit(node.finalbody, guard, other_branch)
            else:
                for name, is_none in _bound(node):
                    found.setdefault(name, []).append((guard, other_branch, is_none))

    visit(tree.body, None, False)
    return found


def _bound(node: ast.stmt) -> list[tuple[str, bool]]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [(node.name, False)]
    if isinstance(node, ast.Assign):
        is_none = isinstance(node.value, ast.Constant) and node.value.value is None
        names = []
        for target in node.targets:
            elements = target.elts if isinstance(target, ast.Tuple) else [target]
            names += [(t.id, is_none) for t in elements if isinstance(t, ast.Name)]
        return names
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        is_none = isinstance(node.value, ast.Constant) and node.value.value is None
        return [(node.target.id, is_none)]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [((alias.asname or alias.name).split(".")[0], False) for alias in node.names]
    return []


def public_names(origin: str | None) -> set[str] | None:
    """Public names a module's source defines at top level (its literal ``__all__`` if it has one).

    What a module replaced whole must define too: the engine refuses a replacement that lacks one
    (megatron's own ``from module import name`` would fail), and ``--check`` says the same. None
    when the source cannot be read (a compiled module, a namespace package).
    """
    if not origin or not origin.endswith(".py"):
        return None
    try:
        with open(origin, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=origin)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                return {str(n) for n in ast.literal_eval(node.value)}
            except ValueError:
                break
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def names_lacking(origin: str | None, impl: types.ModuleType) -> list[str]:
    """The public names of the upstream module (``public_names``) that the replacement module lacks."""
    wanted = public_names(origin)
    return sorted(name for name in wanted or () if not hasattr(impl, name))
