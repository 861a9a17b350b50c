"""Where registrations come from, and only from there.

1. Packs shipped in ``src/fl_patch/impls/`` (``FL_PATCH_PACKS``; default: all of them.
   Each pack registers for its own vendor, so the CPU pack is inert on a GPU machine).
2. Modules named in ``FL_PATCH_REGISTRY`` or ``--registry``.
3. Installed distributions' entry points in the group ``fl_patch.registries``.
4. A FlagScale plugin tree: ``megatron/plugin/override_registry.py`` on a ``sys.path``
   entry the user put there (``compat.flagscale_tree``, which also makes its own ``decorators.py``
   and platform detection work with fl_patch).

2, and 1 when the user asked for packs (named them in ``FL_PATCH_PACKS``, or named a trigger
package in ``FL_PATCH_TRIGGERS``), load at ``install()``. 3, 4 and the default packs (all,
nobody asked) load when the first megatron module (or a package of
``FL_PATCH_TRIGGERS``) starts loading. For the packs that is the blast radius (docs/reliability.md):
a pack changes nothing in a process that never imports megatron, whatever installed
fl_patch (registry mode installs at the program's first import, for the user's targets
only: a program that patches ``json.dumps`` gets neither the CPU pack's ``typing.override``
nor the CUDA-on-CPU transfer of torch). A pack's registration for a target and vendor
the user's registry module registered too yields to the user's. For 3 and 4, scanning
installed distributions and probing a namespace package cost milliseconds that a process
which never imports megatron should not pay.
A source that fails is a problem (one warning, or an error in strict mode) and
contributes nothing, not even the registrations it made before failing; the
others still load.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import os
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fl_patch.config.settings import ENV
from fl_patch.core.errors import is_stop_request
from fl_patch.core.located import users_line
from fl_patch.host import registry_lookup as _lookup

ENV_LOADING = ENV.LOADING

if TYPE_CHECKING:
    from fl_patch.core.errors import ProblemSink
    from fl_patch.core.registry import Registry

__all__ = [
    "ENTRY_POINT_GROUP",
    "import_source",
    "load_entry_points",
    "load_packs",
    "load_registry_modules",
]

ENTRY_POINT_GROUP = "fl_patch.registries"


class _Missing(Exception):
    """A registry module that is not on this process's ``sys.path`` (``missing_ok``)."""


# The shipped packs, by name (``FL_PATCH_PACKS``): each a registry module under ``fl_patch.impls`` that only
# calls ``register()`` with strings for its own vendor (or ``module:function``, called to register). Named
# here by path, never imported until a pack is loaded: the packs are plugins, above every layer.
PACKS: dict[str, str] = {
    # upstream megatron-core and megatron.training on a machine with no GPU (vendor cpu)
    "cpu": "fl_patch.impls.cpu.registry:register_pack",
    # the CPU pack's process-wide CUDA-on-CPU transfer for the code around megatron (vendor cpu too), a pack of its
    # own so that FL_PATCH_PACKS=cpu keeps the megatron patches alone; FL_PATCH_CUDA_ON_CPU=0 also turns it off
    "cuda_on_cpu": "fl_patch.impls.cuda_on_cpu.registry:register_pack",
    # megatron-core's hot ops on Triton kernels (vendor flaggems, MG_FL_PREFER=flaggems)
    "flaggems": "fl_patch.impls.flaggems.registry:register_pack",
}


def import_source(
    module_name: str,
    what: str,
    registry: Registry,
    problems: ProblemSink,
    *,
    yield_to_existing: bool = False,
    missing_ok: bool = False,
) -> types.ModuleType | None:
    """Import a registry module (``pkg.mod``), or import one and call its function (``pkg.mod:function``).

    Looked for on ``sys.path``, then in the directory the job started in (``host/registry_lookup.py``: the
    same rule for ``--check``, ``--list`` and every process of a run). ``missing_ok``: a module that
    exists in neither raises ``_Missing`` instead of being a problem.
    """
    module_name, _, function = module_name.partition(":")
    looked_in_start_dir = False
    while True:
        dropped: list[str] = []
        try:
            with registry.atomically(yield_to_existing=yield_to_existing), loading():
                try:
                    module = importlib.import_module(module_name)
                    if function:
                        getattr(module, function)()
                except BaseException:
                    dropped = _pending_targets(registry)  # what the failure throws away with the module
                    raise
            _lookup.serve_impl_roots(module_name, (r.impl_name for r in registry.registrations()))
            return module
        except BaseException as exc:  # (a broken registry, even one that calls sys.exit, must not end the run)
            if is_stop_request(exc):
                raise  # Ctrl-C, or the program's signal handler landing here: the program's, obeyed
            itself_missing = _is_itself_missing(exc, module_name)
            if itself_missing and not looked_in_start_dir and _lookup.serve_from_start_dir(module_name):
                looked_in_start_dir = True
                continue  # found in the directory the job started in: import it from there
            if missing_ok and itself_missing:
                raise _Missing(module_name) from None
            if itself_missing:
                # Nothing of the user's ran: no line of theirs to point at; the setting that named it.
                missing = getattr(exc, "name", None) or module_name
                problems.problem(
                    _lookup.not_found_message(what, module_name, missing), where=(f"<{what} {module_name}>", 0)
                )
            else:
                problems.problem(
                    f"fl_patch: {what} {module_name!r} failed to import: {type(exc).__name__}: {exc}"
                    + _dropped_note(dropped),
                    where=users_line(exc),
                )
            return None


def _pending_targets(registry: Registry) -> list[str]:
    """The targets registered so far inside the ``atomically`` block this thread is in (dropped if it fails)."""
    return [r.target for r in registry.pending()]


def _dropped_note(targets: list[str]) -> str:
    """What a registry that failed half-way loses: its earlier registrations, which would otherwise go without a word."""
    if not targets:
        return ""
    shown = ", ".join(targets[:3]) + (", ..." if len(targets) > 3 else "")
    return (
        f"; its {len(targets)} registration(s) made before that line ({shown}) are dropped too "
        "(a registry module loads whole or not at all); fix the line and every one of them applies"
    )


def _is_itself_missing(exc: BaseException, module_name: str) -> bool:
    """The registry module (or a package above it) does not exist, as opposed to failing inside."""
    name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    return bool(name) and (module_name == name or module_name.startswith(f"{name}."))


def load_packs(names: tuple[str, ...] | None, registry: Registry, problems: ProblemSink) -> list[str]:
    """Import the registry module of each named pack (all shipped packs for None)."""
    loaded = []
    for name in PACKS if names is None else names:
        registry_module = PACKS.get(name)
        if registry_module is None:
            problems.problem(f"fl_patch: FL_PATCH_PACKS names unknown pack {name!r} (shipped: {', '.join(PACKS)})")
            continue
        if import_source(registry_module, "pack registry", registry, problems, yield_to_existing=True) is not None:
            loaded.append(name)
    return loaded


def load_registry_modules(
    names: tuple[str, ...], registry: Registry, problems: ProblemSink, *, missing: list[str] | None = None
) -> list[str]:
    """Import each registry module; with ``missing``, those not on ``sys.path`` are put there, not reported."""
    loaded = []
    for name in names:
        try:
            if import_source(name, "registry module", registry, problems, missing_ok=missing is not None) is not None:
                loaded.append(name)
        except _Missing:
            missing.append(name)  # type: ignore[union-attr]  # missing_ok is set only with a list
    return loaded


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """While plugin code loads, the children it starts know it (``FL_PATCH_LOADING``): they do not load it again.

    A registry that probes the machine in a Python subprocess at import
    (``subprocess.run([sys.executable, "-c", ...])``) starts a process that inherits the
    environment, so fl_patch would load the registry there too, which starts another: a fork
    bomb. The bound is by cause: a process started while its parent was loading registries is
    that loading's helper, not a job; it does not load registries (``startup.activate``). The
    variable names the loading process's pid; it is removed again when the outermost
    loading ends (plugin code that starts a child *after* loading, a worker say, is not
    affected).
    """
    key = ENV_LOADING
    previous = os.environ.get(key)
    os.environ[key] = str(os.getpid())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = previous


def load_entry_points(registry: Registry, problems: ProblemSink, *, done: set[str] | None = None) -> list[str]:
    """Load each ``fl_patch.registries`` entry point; a callable one is called.

    ``done`` (updated as they load) names entry points loaded already: skipped, so a load
    that was interrupted half-way and run again does not call the first ones twice.
    """
    import importlib.metadata  # deferred: ~25 ms, paid only when megatron is imported

    loaded: list[str] = []
    try:
        entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception as exc:  # noqa: BLE001
        problems.problem(f"fl_patch: cannot read installed entry points: {exc!r}")
        return loaded
    for entry_point in entry_points:
        label = f"{entry_point.name} = {entry_point.value}"
        if done is not None and label in done:
            continue
        try:
            with registry.atomically(), loading():
                obj = entry_point.load()
                if callable(obj) and not isinstance(obj, types.ModuleType):
                    obj()
        except BaseException as exc:  # (SystemExit included: a plugin does not end the run)
            if is_stop_request(exc):
                raise
            problems.problem(
                f"fl_patch: entry point {label!r} ({ENTRY_POINT_GROUP}) failed: {type(exc).__name__}: {exc}"
            )
            continue
        loaded.append(label)
        if done is not None:
            done.add(label)
    return loaded
