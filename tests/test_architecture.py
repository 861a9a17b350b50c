"""The package's shape (issue 23): no import circle between fl_patch's modules, no class over 300 lines.

Both read the source with ``ast`` (nothing is imported), so they cost milliseconds. An import
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
