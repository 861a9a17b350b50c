"""Shared fixtures.

Two kinds of test live here. In-process tests patch the real megatron-core that
this pytest process imported once (``megatron_core`` fixture); the ``engine``
fixture gives each a clean fl_patch (no registrations, not installed) and undoes
everything afterwards. Subprocess tests (``run_python``) start a fresh
interpreter, which is the only honest way to test what happens *before* a first
import, at interpreter start-up, or across processes.
"""

from __future__ import annotations

import collections
import compileall
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import fl_patch
from fl_patch.activation import install as _activation
from fl_patch.runtime import RUNTIME

REPO = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).resolve().parent / "support"
# tests/support is grouped by feature; each group is a directory on sys.path (pyproject.toml
# lists the same ones for pytest), so support modules keep short top-level names.
SUPPORT_GROUPS = ("activation", "plugins", "flagscale", "faults", "flaggems")
SUPPORT_PATH = [SUPPORT, *(SUPPORT / group for group in SUPPORT_GROUPS)]


def support_pythonpath(*first: str | Path) -> str:
    """``PYTHONPATH`` for a subprocess: ``first``, the repo, then every support directory."""
    return os.pathsep.join([*map(str, first), str(REPO / "src"), *map(str, SUPPORT_PATH)])


# pytest-xdist's workers ignore SIGINT, and every interpreter a test starts would inherit that:
# Python installs no KeyboardInterrupt handler when SIGINT starts ignored, so each Ctrl-C test
# (a real SIGINT sent to a child) would silently test nothing. A child started from a shell
# has the default, so the tests' children get it too.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Keep subprocesses and this process off the user's own configuration. COLUMNS/LINES too: pytest-xdist's
# workers set COLUMNS=80, a terminal sets its own, and fl_patch's outputs fit that width; the tests see
# what a program writing to a pipe sees (100 columns), whichever way the suite is run.
for _name in list(os.environ):
    if _name.startswith("FL_PATCH") or _name in ("MG_FL_PREFER", "COLUMNS", "LINES"):
        del os.environ[_name]


# One OpenMP thread in every interpreter a test starts (torchrun already gives each of its workers one): the suite
# runs two pytest-xdist workers on two cores, each mostly waiting on such a child, so a child's second thread finds
# no idle core and spins (an fp16 step of the demo took 2 to 10 times the CPU time with two). Set before any child
# starts; a test that wants another count sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def clean_env(**overrides: str) -> dict[str, str]:
    """os.environ without fl_patch variables, with the repo and test support on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k == "MG_FL_PREFER")}
    env["PYTHONPATH"] = support_pythonpath()
    env["PYTHONWARNINGS"] = "ignore::UserWarning:megatron,ignore:Transformer Engine and Apex:UserWarning"
    env.update(overrides)
    return env


# Triton for the FlagGems pack's kernel tests, outside .venv (scripts/triton-cpu.sh says why).
TRITON_CPU = REPO / ".cache" / "triton-cpu"


def triton_env(interpret: bool, **extra: str) -> dict[str, str]:
    """clean_env with .cache/triton-cpu first on PYTHONPATH; ``interpret``: TRITON_INTERPRET=1."""
    env = clean_env(PYTHONPATH=support_pythonpath(TRITON_CPU), PYTHONWARNINGS="ignore")
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env.update(extra)
    return env


@pytest.fixture
def run_python():
    """Run ``python <args>`` in a fresh interpreter; returns the CompletedProcess."""

    def run(
        *args: str,
        env: dict[str, str] | None = None,
        timeout: float = 300,
        cwd: str | Path | None = None,
        check: bool = True,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, *args],
            env=env if env is not None else clean_env(),
            cwd=str(cwd or REPO),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"python {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
            )
        return proc

    return run


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A clean fl_patch: no registrations, no packs, not installed; reset afterwards."""
    _activation._reset_for_tests()
    monkeypatch.setenv("FL_PATCH_PACKS", "none")
    monkeypatch.setenv("FL_PATCH_ENTRY_POINTS", "0")
    monkeypatch.setenv("FL_PATCH_FLAGSCALE", "0")
    monkeypatch.setenv("FL_PATCH_RANK_CHECK", "off")  # fl_patch's own registration (job/) left out too
    yield RUNTIME.engine
    _activation._reset_for_tests()


@pytest.fixture(scope="session")
def megatron_core() -> object:
    """Import the real megatron.core once for in-process tests.

    With a CPU-only torch, ``import megatron.core`` fails on an unconditional
    ``import triton``; the CPU pack's stand-in module is substituted for that one
    import, then fl_patch is reset so tests start from upstream megatron-core.
    """
    _activation._reset_for_tests()
    fl_patch.register(
        "megatron.core.transformer.moe.ops.paged_stash", "fl_patch.impls.cpu.paged_stash_ops", vendor="default"
    )
    os.environ["FL_PATCH_PACKS"] = "none"
    try:
        fl_patch.install()
        import megatron.core
        import megatron.core.optimizer
        import megatron.core.optimizer_param_scheduler
    finally:
        # Keep the stand-in module imported (upstream's cannot import here), forget the rest.
        stub = sys.modules.get("megatron.core.transformer.moe.ops.paged_stash")
        _activation._reset_for_tests()
        if stub is not None:
            sys.modules["megatron.core.transformer.moe.ops.paged_stash"] = stub
        del os.environ["FL_PATCH_PACKS"]
    return megatron.core


@contextlib.contextmanager
def fresh_modules(names: list[str]) -> Iterator[None]:
    """Drop ``names`` from sys.modules for the test; put the originals back afterwards.

    The parent package's attribute is restored too: ``from pkg import mod`` reads it.
    """
    saved = {name: sys.modules.pop(name) for name in names}
    try:
        yield
    finally:
        for name, module in saved.items():
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, module)


# The files that take longest (wall seconds of the whole file, measured on CI's kind of machine: 2 cores, the
# full suite), slowest first. pytest-xdist hands whole files to its workers in collection order
# (``--dist loadfile --no-loadscope-reorder``, pyproject.toml); by default it would order them by their number of
# tests, which puts one-test files that take half a minute (the GPU compile, the wheel) last, where one worker
# runs them while the other has finished. With these first, the run ends on short files and both workers end
# together. Every other file comes after them in xdist's own default order (more tests first, else as collected).
# A file missing here only starts later; the order never changes what a test does.
SLOWEST_FILES = (
    "tests/impls/test_flaggems_interpret.py",
    "tests/impls/test_cuda_on_cpu.py",
    "tests/impls/test_cpu_training.py",
    "tests/scenarios/test_hostile_matrix.py",
    "tests/scenarios/test_train_gpt.py",
    "tests/job/test_launchers.py",
    "tests/impls/test_flaggems_fp8.py",
    "tests/job/test_ray.py",
    "tests/impls/test_cpu.py",
    "tests/activation/test_import_lock.py",
    "tests/activation/test_lookup.py",
    "tests/compare/test_packs.py",
    "tests/compare/test_planted.py",
    "tests/compat/test_flagscale_plugin.py",
    "tests/compat/test_flagscale_tree.py",
    "tests/host/test_ranks.py",
    "tests/test_cli_plugin_first.py",
    "tests/impls/test_flaggems_compile.py",
    "tests/hooks/test_finder.py",
    "tests/impls/test_te_moe_fusions.py",
    "tests/diagnostics/test_drift.py",
    "tests/compare/test_run.py",
    "tests/host/test_gloo_exit.py",
    "tests/impls/test_flaggems.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files of :data:`SLOWEST_FILES` first, in that order; every other file after them, those with more tests
    first (the order xdist gives files without ``--no-loadscope-reorder``). The sort is stable: the tests of a file
    keep their order, and stay together."""
    rank = {path: index for index, path in enumerate(SLOWEST_FILES)}
    count = collections.Counter(_file_of(item) for item in items)

    def key(item: pytest.Item) -> tuple[int, int]:
        path = _file_of(item)
        return (rank[path], 0) if path in rank else (len(rank), -count[path])

    items.sort(key=key)


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


# The sources the tests' interpreters import, compiled once before any starts. Python writes a module's bytecode
# cache at its first import, unless PYTHONDONTWRITEBYTECODE is set (it is on some machines and CI images; every
# child inherits it): then each of the suite's ~800 interpreters compiled every fl_patch and support module it
# imported from source again, about 0.2 s of CPU each for fl_patch's alone. py_compile writes the cache either
# way, and only for a file whose cache is missing or stale; an interpreter reads an up-to-date cache whatever the
# setting. What is compiled is what would have been compiled: no test sees a difference but the time.
PRECOMPILED = (REPO / "src", REPO / "tests", REPO / "examples", REPO / "sitecustomize_template")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller compiled them before it started the workers
    for folder in PRECOMPILED:
        if folder.is_dir():
            compileall.compile_dir(str(folder), quiet=2, workers=1)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most four. Each worker imports torch and
    megatron-core (about 0.6 GB) and most tests start interpreters of their own, so more
    workers than cores only queue, and past four they only add memory."""
    return max(1, min(4, os.cpu_count() or 1))


def runs(installed: object, impl: object) -> bool:
    """Whether ``installed`` (what a target holds now) runs ``impl``.

    fl_patch never installs the impl object itself: a function or method target holds fl_patch's own
    function over the impl's code (``core/patch.py``), and a class target keeps the upstream class,
    whose instantiation builds the impl (``core/classes.py``; a re-exported name holds a stand-in
    subclass of the impl).
    """
    from fl_patch.core.classes import is_stand_in, redirects_to

    if isinstance(installed, (staticmethod, classmethod)):
        installed = installed.__func__
    if isinstance(impl, (staticmethod, classmethod)):
        impl = impl.__func__
    if isinstance(installed, type) and isinstance(impl, type):
        return redirects_to(installed) is impl or (is_stand_in(installed) and installed.__mro__[1] is impl)
    code = getattr(installed, "__code__", None)
    return code is not None and code is getattr(impl, "__code__", None) and installed is not impl
