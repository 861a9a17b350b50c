"""The package's shape (issue 44): layers that are packages, imports only downward, no circle; and no
impl that reads its own patched target when it runs.

Every import counts, wherever it is written: at module level, under ``if TYPE_CHECKING:``, or inside a
function (a deferred import is still a dependency). The tests read the source with ``ast`` (nothing is
imported), so they cost milliseconds; the last one first asks a fresh interpreter for every pack's
registrations (strings).

The layers, bottom to top (docs/architecture.md draws them): a module imports only modules of its own
layer or of layers below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fl_patch"

# Bottom to top. "top": the public API (the package's __init__), the CLI, the plugin test helper, and what is
# built on the public API like a plugin: the shipped packs (impls) and the job features (job).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("config",),
    ("core",),
    ("hooks",),
    ("engine",),
    ("runtime",),
    ("host",),
    ("reporting",),
    ("compare",),
    ("sources",),
    ("compat",),
    ("activation",),
    ("diagnostics",),
    ("", "__main__", "cli", "testing", "impls", "job"),
)


def layer_of(module: str) -> int:
    """The index in LAYERS of ``fl_patch.<part>...``'s first part (the package itself is "")."""
    parts = module.split(".")
    first = parts[1] if len(parts) > 1 else ""
    for index, names in enumerate(LAYERS):
        if first in names:
            return index
    raise AssertionError(f"{module}: not in any layer of tests/test_architecture.py (add its package there)")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Each fl_patch module -> the fl_patch modules it imports, anywhere in its source.

    ``from pkg import mod`` imports the module ``pkg.mod`` (and, as any import, runs ``pkg``'s
    ``__init__`` first, which is not counted: a package's own ``__init__`` runs before any of its
    modules whatever imports them).
    """
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]  # an attribute of a module: the module
                if target and target != name:
                    graph[name].add(target)
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
    assert "fl_patch.sources" in graph["fl_patch.activation.install"]  # from fl_patch import sources
    assert len(graph) > 30


def test_no_import_circle_in_fl_patch() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_every_module_is_in_a_layer_and_imports_only_downward() -> None:
    upward = []
    for module, imported in import_graph().items():
        for target in sorted(imported):
            if layer_of(target) > layer_of(module):
                upward.append(f"{module} -> {target}")
    assert upward == [], "imports up the layers: " + "; ".join(upward)


def test_the_graph_reads_imports_inside_functions() -> None:
    graph = import_graph()
    # install() imports the strict and report modes inside a function, only when they are on
    assert "fl_patch.reporting.exit_report" in graph["fl_patch.activation.install"]


def test_no_subpackage_shadows_a_public_name() -> None:
    """``fl_patch.report`` is a function; a subpackage ``fl_patch/report/`` would replace it on the package
    the moment any of its modules is imported (it did: ``fl_patch.report()`` became a module)."""
    import fl_patch

    children = {
        path.stem if path.is_file() else path.name for path in PACKAGE.iterdir() if not path.name.startswith("_")
    }
    assert sorted(set(fl_patch.__all__) & children) == []


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


# Test folders beside the package's own: scenario suites (whole programs across layers) and the benchmarks' helpers.
TEST_FOLDERS_BESIDE = {"scenarios", "bench", "support"}


def test_tests_mirror_the_packages() -> None:
    """``tests/<package>/`` for each package of fl_patch; a test of a root module (``cli.py``) is ``tests/test_cli.py``."""
    tests = Path(__file__).resolve().parent
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders - TEST_FOLDERS_BESIDE <= packages, sorted(folders - TEST_FOLDERS_BESIDE - packages)
    roots = {p.stem for p in PACKAGE.glob("*.py")} | {"architecture", "docs", "typing", "cli_plugin_first"}
    stray = [p.name for p in tests.glob("test_*.py") if p.stem.removeprefix("test_") not in roots]
    assert not stray, f"tests at the top that test no root module: {stray}"
