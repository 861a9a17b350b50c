"""A Ray driver with fl_patch active that starts an actor fl_patch will not reach is told, once.

Armed at start-up with the child-launch watch (``FL_PATCH_CHILDREN=0`` leaves both out),
it costs one string comparison per import until ``ray.actor`` loads, and nothing in a
process that never imports Ray. When ``ray.actor`` has loaded, ``ActorClass._remote`` (what
``Actor.remote()`` and ``Actor.options(...).remote()`` call) is wrapped: at the first actor
whose worker will not run fl_patch, one ``FlPatchWarning`` names the actor class and the
fix. A worker runs fl_patch when its effective runtime_env (the job's, merged with the
actor's own, ``env_vars`` per variable) carries fl_patch's setup hook or the bootstrap on
``PYTHONPATH`` (``ray.reaches``), when it sets ``FL_PATCH=0`` (on purpose: nothing said),
or when this very process started the Ray cluster (``ray.init()`` with no cluster to join)
with the bootstrap on its own ``PYTHONPATH``: the raylet, and so every worker, inherited it.

Standard library only at import: this module is imported at every interpreter start-up
that arms fl_patch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from fl_patch.host.children import PACKAGE_BOOTSTRAP
from fl_patch.runtime import RUNTIME

# Not ``from typing import Any``: typing costs ~3 ms at the start-up of every process (see fl_patch/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SETUP_HOOK", "bootstrap_dir", "reaches", "watch"]

_WATCHED = "ray.actor"


class _AfterExec:
    """A loader that runs the real one, then ``callback(module)``; every other attribute is the real loader's."""

    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        for holder in (module, getattr(module, "__spec__", None)):
            if holder is not None and getattr(holder, "__loader__" if holder is module else "loader", None) is self:
                setattr(holder, "__loader__" if holder is module else "loader", self._loader)
        self._loader.exec_module(module)
        try:
            self._callback(module)
        except Exception:  # noqa: BLE001  (a diagnostic never breaks Ray's import)
            pass


class _RayActorWatch:
    """A ``sys.meta_path`` entry that answers nothing but ``ray.actor``, whose loader it wraps."""

    def __init__(self) -> None:
        self.busy = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != _WATCHED or self.busy:
            return None
        self.busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):  # the finders behind this one; never importlib.util.find_spec from here
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once: ray.actor loads once per process
        spec.loader = _AfterExec(spec.loader, _wrap_actor_class)
        return spec

    def invalidate_caches(self) -> None:
        pass


SETUP_HOOK = "fl_patch.job.ray.setup_worker"  # the Ray worker setup hook fl_patch.job.ray.runtime_env names


def bootstrap_dir() -> str:
    return os.path.realpath(PACKAGE_BOOTSTRAP)


def reaches(runtime_env: Mapping[str, Any] | None) -> bool:
    """Whether a worker with this (effective) runtime_env runs fl_patch: our hook, or the bootstrap on its PYTHONPATH."""
    if not runtime_env:
        return False
    if runtime_env.get("worker_process_setup_hook") == SETUP_HOOK:
        return True
    env_vars = runtime_env.get("env_vars") or {}
    bootstrap = bootstrap_dir()
    return any(
        entry
        and (
            os.path.realpath(entry) == bootstrap
            or entry.rstrip("/").endswith(("fl_patch/activation/bootstrap", "sitecustomize_template"))
        )
        for entry in str(env_vars.get("PYTHONPATH", "")).split(os.pathsep)
    )


def watch() -> None:
    """Watch this process's Ray actor launches (once; at once if ``ray.actor`` is loaded already)."""
    loaded = sys.modules.get(_WATCHED)
    if loaded is not None:
        _wrap_actor_class(loaded)
    elif not any(isinstance(finder, _RayActorWatch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RayActorWatch())


def _wrap_actor_class(module: ModuleType) -> None:
    actor_class = getattr(module, "ActorClass", None)
    original = getattr(actor_class, "_remote", None)
    if RUNTIME.ray_watch["wrapped"] or actor_class is None or original is None:
        return
    RUNTIME.ray_watch["wrapped"] = True

    def _remote(self: Any, args: Any = None, kwargs: Any = None, **actor_options: Any) -> Any:
        if not RUNTIME.ray_watch["told"]:
            try:
                _check(self, actor_options)
            except Exception:  # noqa: BLE001  (a diagnostic never stops an actor from starting)
                pass
        return original(self, args, kwargs, **actor_options)

    _remote.__wrapped__ = original  # type: ignore[attr-defined]
    actor_class._remote = _remote


def _effective_runtime_env(actor: Any, actor_options: dict[str, Any]) -> dict[str, Any]:
    import ray

    job: dict[str, Any] = {}
    try:
        job = dict(ray.get_runtime_context().runtime_env or {})
    except Exception:  # noqa: BLE001  (not connected yet: ray.remote() connects on first use)
        job = {}
    own = actor_options.get("runtime_env")
    if own is None:
        own = (getattr(actor, "_default_options", None) or {}).get("runtime_env")
    merged = {**job, **dict(own or {})}
    merged["env_vars"] = {**dict(job.get("env_vars") or {}), **dict((own or {}).get("env_vars") or {})}
    return merged


def _cluster_started_here_with_bootstrap() -> bool:
    """This process started the cluster (its raylet inherited this environment) and has the bootstrap on PYTHONPATH."""
    worker = sys.modules.get("ray._private.worker")
    node = getattr(worker, "_global_node", None)
    # ray.init() that started the cluster made its node with ray_init_cluster=True and started its processes;
    # one that joined a cluster (connect_only) started none.
    if node is None or not (getattr(node, "ray_init_cluster", False) or getattr(node, "all_processes", None)):
        return False
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return any(entry and os.path.realpath(entry) == bootstrap_dir() for entry in entries)


def _check(actor: Any, actor_options: dict[str, Any]) -> None:
    from fl_patch.core.errors import warn

    effective = _effective_runtime_env(actor, actor_options)
    if str(effective["env_vars"].get("FL_PATCH", "")).strip().lower() in ("0", "false", "no", "off"):
        return  # turned off on purpose
    if reaches(effective) or _cluster_started_here_with_bootstrap():
        return
    RUNTIME.ray_watch["told"] = True
    name = getattr(getattr(actor, "__ray_metadata__", None), "class_name", None) or type(actor).__name__
    warn(
        f"fl_patch: this Ray driver runs with fl_patch, but the actor {name} is started by a raylet whose "
        "environment does not have it, and neither the job's runtime_env nor the actor's carries it: its worker "
        "runs without fl_patch's patches. Give the job runtime_env=fl_patch.job.ray.runtime_env(...) "
        '(ray job submit: --runtime-env-json "$(python -m fl_patch.job.ray)"); this is said once',
        stacklevel=4,
    )
