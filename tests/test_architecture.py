"""The package's shape (issue 23): no import circle between fl_patch's modules, no class over 300 lines; and no
impl that reads its own patched target when it runs.

They read the source with ``ast`` (nothing is imported), so they cost milliseconds; the last one first asks a
fresh interpreter for every pack's registrations (strings). An import
counts where it is written at module level, including under ``if TYPE_CHECKING:`` (a type
checker follows those too); imports inside functions are deferred on purpose and do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fl_patch"
MAX_CLASS_LINES = 300


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If | ast.Try):  # TYPE_CHECKING blocks, optional imports
            pending.extend(node.body)
            pending.extend(node.orelse)
            pending.extend(getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                pending.extend(handler.body)
    return found


def import_graph() -> dict[str, set[str]]:
    """Each fl_patch module -> the fl_patch modules it imports at module level."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _module_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from pkg import mod`` imports the module pkg.mod when there is one.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_circle_and_accepts_a_tree() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_fl_patch_imports() -> None:
    graph = import_graph()
    assert "fl_patch.core.registration" in graph["fl_patch.core.registry"]
    assert "fl_patch.core.registration" in graph["fl_patch.core.target"]  # under TYPE_CHECKING
    assert len(graph) > 30


def test_no_import_circle_in_fl_patch() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def _long_classes() -> list[str]:
    long = []
    for path in PACKAGE.rglob("*.py"):
        if "impls" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
    return long


def test_no_class_over_300_lines_outside_impls() -> None:
    assert _long_classes() == []


# Every pack's registrations, as strings (a registry imports nothing of what it names): (target, impl) pairs.
_REGISTRATIONS = """
import json, fl_patch
import importlib
from fl_patch.impls import PACKS
from fl_patch.impls.conditions import ALL, assuming
with assuming({condition: True for condition in ALL}):  # every registration, whatever this machine has
    for spec in PACKS.values():
        module, _, function = spec.partition(":")
        getattr(importlib.import_module(module), function)()
pairs = {(r.target, r.impl) for r in fl_patch.report()}
print(json.dumps(sorted(pairs)))
"""


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def test_no_impl_reads_a_patched_target_when_it_runs() -> None:
    """An impl reaches the original through what its module captured before the patch, or through
    ``fl_patch.original``; never by reading the target's attribute when it runs, which is then the impl itself (the
    CUDA-on-CPU ``init_device_mesh`` did: every call recursed until RecursionError). Checked in the source of every
    module any pack's registrations name, against the targets that module's impls patch: a function body there that
    reads one of them by its dotted name is reported (module-level reads happen at import, before the patch)."""
    import json
    import subprocess
    import sys

    from .conftest import clean_env

    proc = subprocess.run(
        [sys.executable, "-c", _REGISTRATIONS], env=clean_env(FL_PATCH="0"), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    pairs = json.loads(proc.stdout.strip().splitlines()[-1])
    # module of each impl -> the targets it patches (an impl's helpers live in its module)
    own: dict[Path, set[str]] = {}
    for target, impl in pairs:
        name = impl.partition(":")[0]
        for candidate in (name, name.rpartition(".")[0]):
            path = PACKAGE / (candidate.removeprefix("fl_patch.").replace(".", "/") + ".py")
            if candidate.startswith("fl_patch.") and path.is_file():
                own.setdefault(path, set()).add(target)
                break
    assert len(pairs) > 150 and len(own) > 15, (len(pairs), len(own))
    found = []
    for path, targets in sorted(own.items()):
        for function in ast.walk(ast.parse(path.read_text())):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(function):
                    if isinstance(node, ast.Attribute) and _dotted(node) in targets:
                        found.append(f"{path.name}:{node.lineno} {function.name} reads {_dotted(node)}")
    assert not found, found
