"""``--check --against``: every registration against a Megatron that is not installed, statically.

What a vendor asks before an upgrade: which of my patches break on the next release, and
where did a vanished target go? ``python -m fl_patch --check --against X`` answers without
installing or importing X's megatron: its source is read with ``ast``.

``X`` is a megatron-core version (its wheel is downloaded once with ``pip download`` into
``$FL_PATCH_CACHE`` or ``~/.cache/fl_patch/wheels``; ``--offline`` uses only the cache),
a wheel file, or a source tree (a Megatron-LM checkout, or any directory that holds
``megatron/core``). Two ``--against`` print both verdicts and what changes between them.

For each registration whose target is under ``megatron``:

- **not for this version**: its ``requires=`` gate excludes X's version (read from
  ``megatron/core/package_info.py``); nothing else is checked, as on an installed release;
- **target**: the module (``pkg/mod.py`` or ``pkg/mod/__init__.py``), then the attribute
  path inside it: a top-level ``def``/``class``/assignment/import (an import from another
  megatron module is followed), a class member (own body, then its bases), FlagScale's key
  form (``module.func`` for one class's staticmethod). When it is missing, *where it went*:
  the definitions of the same name elsewhere in X (``training/utils.py`` ->
  ``training/utils/common_utils.py``), or modules of the same name;
- **signature**: a target that is a ``def`` is compared with the impl's ``def`` (read from
  fl_patch's own source, not imported: an impl may import megatron) by the rules of
  ``_signatures``, and the impl's calls of the original are bound against it (``introspection/forwarding.py``).

Targets outside megatron (``torch.*``, ``typing.override``) are not X's business: listed,
not judged. The exit status is 1 when any registration is an error under any ``--against``.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fl_patch.core.gates import package_info_version, parse_gate
from fl_patch.core.missing import strip_repeated_module_name
from fl_patch.core.signatures import compare_signatures
from fl_patch.diagnostics.forwarding import forwarding_findings, string_value

if TYPE_CHECKING:
    from fl_patch.core.registration import Registration

__all__ = ["DriftResult", "MegatronSource", "drift", "open_source", "run"]


# ------------------------------------------------------------------------------------------ sources
class MegatronSource:
    """The ``.py`` files of a megatron tree, from a directory or a wheel, by module name."""

    def __init__(self, label: str, files: dict[str, str | Path], reader: object) -> None:
        self.label = label
        self._files = files  # "megatron/core/utils.py" -> where to read it
        self._reader = reader
        self.version = None
        info = self.read("megatron/core/package_info.py")
        if info is not None:
            self.version = _version_from_text(info)

    def read(self, relpath: str) -> str | None:
        where = self._files.get(relpath)
        if where is None:
            return None
        if isinstance(self._reader, zipfile.ZipFile):
            return self._reader.read(str(where)).decode("utf-8", errors="replace")
        return Path(where).read_text(encoding="utf-8", errors="replace")

    def module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in self._files:
                return candidate
        return None

    def is_package(self, module: str) -> bool:
        base = module.replace(".", "/") + "/"
        return any(path.startswith(base) for path in self._files)

    def modules(self) -> list[str]:
        names = []
        for path in self._files:
            name = path[:-3].replace("/", ".")
            names.append(name[: -len(".__init__")] if name.endswith(".__init__") else name)
        return sorted(names)

    @functools.lru_cache(maxsize=2048)  # noqa: B019  (a source lives as long as the check)
    def tree(self, module: str) -> ast.Module | None:
        path = self.module_file(module)
        text = self.read(path) if path else None
        if text is None:
            return None
        try:
            return ast.parse(text)
        except SyntaxError:
            return None


def _version_from_text(text: str) -> str | None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(text)
    try:
        return package_info_version(handle.name)
    finally:
        os.unlink(handle.name)


def _cache_dir() -> Path:
    return Path(os.environ.get("FL_PATCH_CACHE") or Path.home() / ".cache" / "fl_patch" / "wheels")


def _wheel_for(version: str, offline: bool) -> Path:
    cache = _cache_dir()
    pattern = f"megatron_core-{version}-*.whl"
    found = sorted(cache.glob(pattern))
    if found:
        return found[0]
    if offline:
        raise ValueError(f"no wheel of megatron-core {version} in {cache} (--offline)")
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--ignore-requires-python", "-q", "-d", str(cache)]
    proc = subprocess.run([*cmd, f"megatron-core=={version}"], capture_output=True, text=True, check=False)
    found = sorted(cache.glob(pattern))
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ValueError(f"cannot download megatron-core {version} into {cache}: {tail[0]}")
    return found[0]


def open_source(spec: str, *, offline: bool = False) -> MegatronSource:
    """A version, a wheel path or a source tree; ``ValueError`` when it is none of them, or not megatron."""
    path = Path(spec)
    if path.is_dir():
        root = path
        if not (root / "megatron" / "core").is_dir():
            raise ValueError(f"{spec}: not a megatron source tree (no megatron/core inside)")
        files: dict[str, str | Path] = {}
        for sub in ("megatron/core", "megatron/training"):
            for file in sorted((root / sub).rglob("*.py")):
                files[file.relative_to(root).as_posix()] = file
        return MegatronSource(f"{spec} (source tree)", files, None)
    if path.suffix == ".whl" or path.is_file():
        if not path.is_file():
            raise ValueError(f"{spec}: no such wheel")
        try:
            archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile:
            raise ValueError(f"{spec}: not a wheel (not a zip archive)") from None
        files = {n: n for n in archive.namelist() if n.startswith("megatron/") and n.endswith(".py")}
        if not any(n.startswith("megatron/core/") for n in files):
            raise ValueError(f"{spec}: not a megatron-core wheel (no megatron/core inside)")
        return MegatronSource(f"{path.name}", files, archive)
    from packaging.version import InvalidVersion, Version

    try:
        Version(spec)
    except InvalidVersion:
        raise ValueError(
            f"--against {spec!r}: not a megatron-core version, a wheel or a source tree directory"
        ) from None
    wheel = _wheel_for(spec, offline)
    source = open_source(str(wheel))
    source.label = f"megatron-core {spec} ({wheel.name})"
    return source


# ------------------------------------------------------------------------------------------ resolving
@dataclass
class Found:
    kind: str  # module, function, method, staticmethod, classmethod, class, property, attribute, import
    node: ast.AST | None = None
    module: str = ""
    note: str = ""
    guard: str | None = None  # the `if`/`try` test the binding sits under


def _bindings(tree: ast.Module) -> dict[str, tuple[ast.AST, str | None]]:
    """Top-level name -> (its binding node, the guard it sits under or None); the last binding wins,
    an unguarded one over a guarded one."""
    found: dict[str, tuple[ast.AST, str | None]] = {}

    def bind(name: str, node: ast.AST, guard: str | None) -> None:
        if name in found and found[name][1] is None and guard is not None:
            return
        found[name] = (node, guard)

    def visit(body: list[ast.stmt], guard: str | None) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bind(node.name, node, guard)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(t, ast.Name):
                            bind(t.id, node, guard)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                bind(node.target.id, node, guard)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bind((alias.asname or alias.name).split(".")[0], node, guard)
            elif isinstance(node, ast.If):
                test = ast.unparse(node.test)
                visit(node.body, guard or test)
                visit(node.orelse, guard or f"not ({test})")
            elif isinstance(node, ast.Try):
                visit(node.body, guard or "try")
                for handler in node.handlers:
                    visit(handler.body, guard or "except")
                visit(node.orelse, guard or "try")
                visit(node.finalbody, guard)

    visit(tree.body, None)
    return found


def _member_kind(node: ast.AST) -> str:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        names = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
        if "staticmethod" in names:
            return "staticmethod"
        if "classmethod" in names:
            return "classmethod"
        if "property" in names or any(n.endswith((".setter", ".getter")) for n in names):
            return "property"
        return "method"
    if isinstance(node, ast.ClassDef):
        return "class"
    return "attribute"


def _class_member(source: MegatronSource, module: str, cls: ast.ClassDef, name: str, depth: int = 0) -> Found | None:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return Found(_member_kind(node), node, module)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return Found("attribute", node, module)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return Found("attribute", node, module)
    if depth > 8:
        return None
    for base in cls.bases:  # inherited: follow bases defined in megatron
        base_found = _resolve_name(source, module, ast.unparse(base).split(".")[-1], depth + 1)
        if base_found is not None and isinstance(base_found.node, ast.ClassDef):
            member = _class_member(source, base_found.module, base_found.node, name, depth + 1)
            if member is not None:
                member.note = member.note or f"inherited from {base_found.module}.{base_found.node.name}"
                return member
    return None


def _resolve_name(source: MegatronSource, module: str, name: str, depth: int = 0) -> Found | None:
    """A top-level name of ``module``, following ``from megatron... import name``."""
    tree = source.tree(module)
    if tree is None or depth > 8:
        return None
    binding = _bindings(tree).get(name)
    if binding is None:
        if source.module_file(f"{module}.{name}") or source.is_package(f"{module}.{name}"):
            return Found("module", None, f"{module}.{name}")
        return None
    node, guard = binding
    if isinstance(node, ast.ImportFrom):
        origin = _import_origin(module, node, source)
        alias = next(a for a in node.names if (a.asname or a.name).split(".")[0] == name)
        if origin and origin.startswith("megatron"):
            followed = _resolve_name(source, origin, alias.name, depth + 1)
            if followed is not None:
                followed.guard = followed.guard or guard
                return followed
            if source.module_file(f"{origin}.{alias.name}"):
                return Found("module", None, f"{origin}.{alias.name}", guard=guard)
            return None  # imported from a megatron module that does not define it: missing too
        return Found("import", node, module, note=f"imported from {origin}", guard=guard)
    if isinstance(node, ast.Import):
        return Found("import", node, module, note="a module bound by import", guard=guard)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return Found("function", node, module, guard=guard)
    if isinstance(node, ast.ClassDef):
        return Found("class", node, module, guard=guard)
    return Found("attribute", node, module, guard=guard)


def _import_origin(module: str, node: ast.ImportFrom, source: MegatronSource) -> str | None:
    if node.level == 0:
        return node.module
    package = (
        module
        # (not None there: the same call, just checked)
        if source.module_file(module) and source.module_file(module).endswith("__init__.py")  # type: ignore[union-attr]
        else module.rpartition(".")[0]
    )
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def resolve(source: MegatronSource, target: str) -> tuple[Found | None, str]:
    """What ``target`` is in ``source``; else None and why (the missing part)."""
    parts = target.split(".")
    module_end = 0
    for end in range(len(parts), 0, -1):
        if source.module_file(".".join(parts[:end])):
            module_end = end
            break
    if module_end == 0:
        return None, f"no module {parts[0]} in it"
    module = ".".join(parts[:module_end])
    rest = parts[module_end:]
    if not rest:
        return Found("module", None, module), ""
    stripped = strip_repeated_module_name(module, tuple(rest), lambda name: _resolve_name(source, module, name))
    if stripped is not None:  # FlagScale's module_basename.func key appended to the module
        found, why = resolve(source, ".".join([module, *stripped]))
        if found is not None:
            found.note = f"FlagScale's key form: {'.'.join(rest)} in {module} is {'.'.join(stripped)}" + (
                f"; {found.note}" if found.note else ""
            )
        return found, why
    found = _resolve_name(source, module, rest[0])
    if found is None:
        key_form = _key_form(source, module, rest)
        if key_form is not None:
            return key_form, ""
        missing = f"{module}.{rest[0]}"
        if len(rest) > 1 and not source.module_file(f"{module}.{rest[0]}"):
            return None, f"module {module} has no {rest[0]!r} (no such submodule or name)"
        return None, f"{missing} is not defined"
    for depth, name in enumerate(rest[1:], start=1):
        if found.kind == "module":
            inner, why = resolve(source, f"{found.module}.{'.'.join(rest[depth:])}")
            return inner, why
        if found.kind == "class" and isinstance(found.node, ast.ClassDef):
            member = _class_member(source, found.module, found.node, name)
            if member is None:
                return None, f"class {found.module}.{found.node.name} has no member {name!r}"
            member.guard = member.guard or found.guard
            found = member
            continue
        if found.kind == "import":
            return Found("import", found.node, found.module, note=found.note + f" (.{'.'.join(rest[depth:])})"), ""
        return None, f"{'.'.join(parts[: module_end + depth])} is a {found.kind}, it has no {name!r}"
    return found, ""


def _key_form(source: MegatronSource, module: str, rest: list[str]) -> Found | None:
    if len(rest) != 1:
        return None
    tree = source.tree(module)
    classes = []
    for node in tree.body if tree else []:
        if isinstance(node, ast.ClassDef):
            member = _class_member(source, module, node, rest[0])
            if member is not None and member.kind in ("staticmethod", "classmethod"):
                classes.append((node.name, member))
    if len(classes) != 1:
        return None
    member = classes[0][1]
    member.note = f"FlagScale's key form: resolves to {classes[0][0]}.{rest[0]}"
    return member


@functools.lru_cache(maxsize=8)
def _definitions(source: MegatronSource) -> dict[str, list[str]]:
    """name -> dotted places that define it (module-level def/class, class members), for "where it went"."""
    index: dict[str, list[str]] = {}
    for module in source.modules():
        tree = source.tree(module)
        if tree is None:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                index.setdefault(node.name, []).append(f"{module}.{node.name}")
                if isinstance(node, ast.ClassDef):
                    for member in node.body:
                        if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            index.setdefault(member.name, []).append(f"{module}.{node.name}.{member.name}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name) == "torch" for a in node.names
            ):
                index.setdefault("torch", []).append(f"{module}.torch")
        leaf = module.rpartition(".")[2]
        index.setdefault(f"module:{leaf}", []).append(module)
    return index


def where_it_went(source: MegatronSource, target: str) -> list[str]:
    """Places in ``source`` that define the target's last name (or a module of that name), best first."""
    parts = target.split(".")
    index = _definitions(source)
    name = parts[-1]
    candidates = list(index.get(name, [])) + list(index.get(f"module:{name}", []))
    if name == "torch" and len(parts) > 2:  # a module's `torch`: where did the module go?
        candidates = [f"{m}.torch" for m in index.get(f"module:{parts[-2]}", []) if f"{m}.torch" in index["torch"]]
    if len(parts) > 2 and name != "torch":  # Class.method: the same class first
        owner = parts[-2]
        candidates.sort(key=lambda c: (c.split(".")[-2] != owner, _distance(c, target)))
    else:
        candidates.sort(key=lambda c: _distance(c, target))
    return [c for c in dict.fromkeys(candidates) if c != target][:5]


def _distance(candidate: str, target: str) -> int:
    a, b = candidate.split("."), target.split(".")
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    return len(a) + len(b) - 2 * common


# ------------------------------------------------------------------------------------------ impls, statically
@functools.lru_cache(maxsize=256)
def _impl_module_tree(module: str) -> tuple[ast.Module | None, str | None]:
    """fl_patch's own (or a plugin's) impl module, parsed from its file; never imported."""
    parts = module.split(".")
    try:
        top = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None, None
    if top is None:
        return None, None
    if not top.submodule_search_locations:  # a plain top-level module: `mod.func`
        if len(parts) == 1 and top.origin and top.origin.endswith(".py"):
            try:
                return ast.parse(Path(top.origin).read_text(encoding="utf-8")), top.origin
            except (OSError, SyntaxError):
                return None, top.origin
        return None, None
    for base in top.submodule_search_locations:
        path = Path(base, *parts[1:])
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if candidate.is_file():
                try:
                    return ast.parse(candidate.read_text(encoding="utf-8")), str(candidate)
                except SyntaxError:
                    return None, str(candidate)
    return None, None


def _impl_def(impl: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    path = impl.replace(":", ".").split(".")
    for end in range(len(path) - 1, 0, -1):
        tree, _ = _impl_module_tree(".".join(path[:end]))
        if tree is None:
            continue
        body: list[ast.stmt] = tree.body
        node: ast.AST | None = None
        for name in path[end:]:
            node = next(
                (
                    n
                    for n in body
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
                ),
                None,
            )
            if node is None:
                return None
            body = getattr(node, "body", [])
        return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    return None


def _signature_of(node: ast.FunctionDef | ast.AsyncFunctionDef) -> inspect.Signature:
    from fl_patch.diagnostics.check import _signature_from_ast

    return _signature_from_ast(node.args)


# ------------------------------------------------------------------------------------------ the check
@dataclass
class DriftResult:
    target: str
    vendor: str
    impl: str
    level: str  # ok, warning, error, not for this version, outside megatron
    kind: str | None = None
    findings: list[str] = field(default_factory=list)
    moved_to: list[str] = field(default_factory=list)
    requires: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _registrations() -> list[Registration]:
    from fl_patch.activation import install as _activation
    from fl_patch.runtime import RUNTIME

    _activation.load_sources()
    return sorted(RUNTIME.registry.registrations(), key=lambda r: (r.target, r.vendor))


def drift(source: MegatronSource, registrations: list[Registration] | None = None) -> list[DriftResult]:
    """The verdict on each registration against ``source``."""
    results = []
    for reg in _registrations() if registrations is None else registrations:
        results.append(_one(source, reg))
    return results


def _one(source: MegatronSource, reg: object) -> DriftResult:
    target: str = reg.target  # type: ignore[attr-defined]
    result = DriftResult(target, reg.vendor, reg.impl_name, "ok", requires=reg.requires)  # type: ignore[attr-defined]
    if not target.startswith("megatron."):
        result.level = "outside megatron"
        return result
    gate = parse_gate(reg.requires, target)  # type: ignore[attr-defined]
    if gate is not None and gate.distribution == "megatron-core" and not gate.allows(source.version):
        result.level = "not for this version"
        result.findings.append(f"requires {gate.text}; this is megatron-core {source.version}")
        return result
    found, why = resolve(source, target)
    if found is None:
        # create=True creates the last name only: its holder (a module or a class) must exist, as the engine
        # requires when it applies (a missing holder is "target missing" there too)
        holder, _ = resolve(source, target.rpartition(".")[0])
        if reg.create and holder is not None and holder.kind in ("module", "class"):  # type: ignore[attr-defined]
            result.level = "warning"
            result.findings.append(f"not there ({why}): created (create=True)")
            return result
        result.level = "error"
        result.moved_to = where_it_went(source, target)
        went = f"; defined at {', '.join(result.moved_to)}" if result.moved_to else "; not defined anywhere in it"
        result.findings.append(f"target missing: {why}{went}")
        return result
    result.kind = found.kind
    if found.note:
        result.findings.append(found.note)
    if found.guard is not None and found.guard not in ("try",):
        result.findings.append(f"defined only when `{found.guard}`")
    if found.kind in ("function", "method", "staticmethod", "classmethod") and isinstance(
        found.node, (ast.FunctionDef, ast.AsyncFunctionDef)
    ):
        _compare(result, reg, found)
    if result.level == "ok" and any(
        not f.startswith(("imported from", "a module bound", "FlagScale's key")) for f in result.findings
    ):
        result.level = "warning"
    return result


def _compare(result: DriftResult, reg: object, found: Found) -> None:
    impl_name: str = reg.impl_name  # type: ignore[attr-defined]
    if not isinstance(reg.impl, str):  # type: ignore[attr-defined]
        return  # an impl object: its source is this process's, compared by --check where installed
    impl = _impl_def(impl_name)
    if impl is None:
        return  # not a plain def (a view object, a class): nothing to compare statically
    assert isinstance(found.node, (ast.FunctionDef, ast.AsyncFunctionDef))
    target_sig = _signature_of(found.node)
    impl_sig = _signature_of(impl)
    receiver = found.kind in ("method", "classmethod")
    if found.kind in ("classmethod",):
        target_sig = target_sig.replace(parameters=list(target_sig.parameters.values())[1:])
        impl_sig = impl_sig.replace(parameters=list(impl_sig.parameters.values())[1:])
        receiver = False
    errors = [f for f in compare_signatures(target_sig, impl_sig, receiver=receiver) if f.level == "error"]
    decorated = bool(found.node.decorator_list) and found.kind in ("function", "method")
    for finding in errors:
        result.findings.append(
            ("signature (decorated target, read from source): " if decorated else "signature: ") + finding.message
        )
    module_tree, _ = _impl_module_tree(impl_name.replace(":", ".").rsplit(".", 1)[0])
    constants = _module_string_constants(module_tree)
    call_sig = _signature_of(found.node)  # the original as the impl calls it (a method's includes self)
    for finding in forwarding_findings(None, result.target, call_sig, tree=impl, constants=constants):
        result.findings.append(finding.message)
        errors.append(finding)
    if errors and not decorated:
        result.level = "error"


def _module_string_constants(tree: ast.Module | None) -> dict[str, object]:
    constants: dict[str, object] = {}
    for node in tree.body if tree else []:  # in module order: a constant built from earlier ones is read too
        if isinstance(node, ast.Assign):
            names, value = node.targets, string_value(node.value, constants)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            names, value = [node.target], string_value(node.value, constants)
        else:
            continue
        for t in names if value is not None else []:
            if isinstance(t, ast.Name):
                constants[t.id] = value
    return constants


# ------------------------------------------------------------------------------------------ the command
def _text(label: str, version: str | None, results: list[DriftResult]) -> str:
    lines = [f"against {label}: megatron-core {version or '?'}"]
    for r in results:
        if r.level in ("ok", "outside megatron"):
            continue
        gate = f"  [requires {r.requires}]" if r.requires else ""
        lines.append(f"  {r.level:<20} {r.target} [{r.vendor}]{gate}")
        lines.extend(f"      {f}" for f in r.findings)
    counts = {level: sum(r.level == level for r in results) for level in dict.fromkeys(r.level for r in results)}
    lines.append("  " + ", ".join(f"{n} {level}" for level, n in counts.items()))
    return "\n".join(lines) + "\n"


def _diff(a: tuple[str, list[DriftResult]], b: tuple[str, list[DriftResult]]) -> list[dict[str, object]]:
    before = {(r.target, r.vendor): r for r in a[1]}
    changes: list[dict[str, object]] = []
    for r in b[1]:
        old = before.get((r.target, r.vendor))
        if old is not None and old.level != r.level:
            changes.append(
                {"target": r.target, "vendor": r.vendor, "from": old.level, "to": r.level, "why": r.findings}
            )
    return changes


def run(against: list[str], *, as_json: bool = False, offline: bool = False) -> int:
    """``python -m fl_patch --check --against A [--against B] [--json] [--offline]``: the exit status."""
    try:
        sources = [open_source(spec, offline=offline) for spec in against]
    except ValueError as exc:
        sys.stderr.write(f"fl_patch: {exc}\n")
        return 2
    registrations = _registrations()
    verdicts = [(s, drift(s, registrations)) for s in sources]
    failed = any(r.level == "error" for _, results in verdicts for r in results)
    diff = (
        _diff((verdicts[0][0].label, verdicts[0][1]), (verdicts[1][0].label, verdicts[1][1]))
        if len(verdicts) == 2
        else None
    )
    if as_json:
        document: dict[str, object] = {
            "ok": not failed,
            "against": [
                {"source": s.label, "megatron_core": s.version, "registrations": [r.as_dict() for r in results]}
                for s, results in verdicts
            ],
        }
        if diff is not None:
            document["diff"] = diff
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return 1 if failed else 0
    for s, results in verdicts:
        sys.stdout.write(_text(s.label, s.version, results))
    if diff is not None:
        a, b = verdicts[0][0].version, verdicts[1][0].version
        sys.stdout.write(f"\nfrom {a} to {b}: {len(diff)} verdict(s) change\n")
        for change in diff:
            sys.stdout.write(f"  {change['target']} [{change['vendor']}]: {change['from']} -> {change['to']}\n")
    return 1 if failed else 0
