"""Ray: the driver's fl_patch in every worker process of the job, through the job's ``runtime_env``.

Ray actors are not children of the driver: the raylet of each node starts worker
processes with *its* environment (whatever ``ray start`` had), so the bootstrap on the
driver's ``PYTHONPATH`` does not reach them, nor do ``FL_PATCH_*`` / ``MG_FL_PREFER``.
What does reach every worker of a job is its ``runtime_env``::

    import fl_patch.job.ray
    ray.init(runtime_env=fl_patch.job.ray.runtime_env())                 # or merged into yours:
    ray.init(runtime_env=fl_patch.job.ray.runtime_env({"env_vars": {"NCCL_DEBUG": "WARN"}, "pip": [...]}))

    ray job submit --runtime-env-json "$(python -m fl_patch.job.ray)" -- python train.py

:func:`runtime_env` returns the given ``runtime_env`` (a dict or ``ray.runtime_env.RuntimeEnv``;
every field kept) with

- ``env_vars``: the bootstrap directory first on ``PYTHONPATH`` (before the worker's own
  ``${PYTHONPATH}``, which Ray expands, or before the ``PYTHONPATH`` the given env_vars set),
  ``FL_PATCH_BOOTSTRAP``, and every ``FL_PATCH_*`` setting and ``MG_FL_PREFER`` of the driver
  (a variable the given env_vars already set keeps its value);
- ``worker_process_setup_hook``: ``"fl_patch.job.ray.setup_worker"``, by module path, so it
  also works from a JSON config and ``ray job submit``. Each worker runs it before any task
  or actor code: it arms fl_patch there if the bootstrap did not (a node where fl_patch is
  installed at another path), puts the bootstrap on that worker's ``PYTHONPATH`` for the
  processes it starts, then runs the hook the given runtime_env had (by module path;
  kept in ``FL_PATCH_RAY_NEXT_HOOK``). A hook given as a function object cannot be chained
  by path: it is kept, and the env_vars alone activate fl_patch.

Ray merges an actor's own ``runtime_env`` into the job's per field, and ``env_vars`` per
variable, so worker groups that give each actor its ``RANK`` / ``MASTER_ADDR`` (veRL's
``RayWorkerGroup``) keep the job's fl_patch (tested: ``tests/job/test_ray.py``). A driver
whose fl_patch is active and that starts an actor fl_patch will not reach is told once
(``ray_watch.py``). The actors' process groups are checked like any other
(``rank_check.py``): an actor without fl_patch, or with other patches, is named.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from fl_patch.config.settings import ENV, KNOWN_NAMES
from fl_patch.host.ray_watch import SETUP_HOOK, bootstrap_dir, reaches

__all__ = ["NEXT_HOOK", "SETUP_HOOK", "bootstrap_dir", "reaches", "runtime_env", "setup_worker"]

NEXT_HOOK = ENV.RAY_NEXT_HOOK  # the hook the user's runtime_env had, run after fl_patch's
# Per-process values of the driver that mean nothing in a worker.
_NOT_CARRIED = frozenset({ENV.LAUNCHED, ENV.LOADING, ENV.BOOTSTRAP, ENV.RAY_NEXT_HOOK})


def _settings_of(environ: Mapping[str, str]) -> dict[str, str]:
    names = set(KNOWN_NAMES) - _NOT_CARRIED
    return {
        name: value
        for name, value in environ.items()
        if (name in names or name.startswith("FL_PATCH_") or name == ENV.PREFER) and name not in _NOT_CARRIED
    }


def runtime_env(base: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``base`` (your runtime_env, kept whole) with what gives every Ray worker of the job this process's fl_patch."""
    env = os.environ if environ is None else environ
    result: dict[str, Any] = dict(base or {})
    given = dict(result.get("env_vars") or {})
    env_vars = {**_settings_of(env), **given}  # a variable the caller set keeps the caller's value
    bootstrap = bootstrap_dir()
    rest = given.get("PYTHONPATH", "${PYTHONPATH}")
    entries = [e for e in rest.split(os.pathsep) if e and os.path.realpath(e) != bootstrap] if rest else []
    env_vars["PYTHONPATH"] = os.pathsep.join([bootstrap, *entries])
    env_vars[ENV.BOOTSTRAP] = bootstrap
    hook = result.get("worker_process_setup_hook")
    if isinstance(hook, str) and hook and hook != SETUP_HOOK:
        env_vars[NEXT_HOOK] = hook  # run by setup_worker, after fl_patch is armed
        hook = None
    if hook is None or hook == SETUP_HOOK:
        result["worker_process_setup_hook"] = SETUP_HOOK
    result["env_vars"] = env_vars
    return result


def setup_worker() -> None:
    """Ray's ``worker_process_setup_hook``: fl_patch armed in this worker, for it and for the processes it starts."""
    bootstrap = bootstrap_dir()
    if os.environ.get(ENV.ENABLED, "").strip().lower() not in ("0", "false", "no", "off"):
        current = os.environ.get("PYTHONPATH", "")
        entries = [e for e in current.split(os.pathsep) if e]
        if not any(os.path.realpath(e) == bootstrap for e in entries):
            os.environ["PYTHONPATH"] = os.pathsep.join([bootstrap, *entries])
        os.environ[ENV.BOOTSTRAP] = bootstrap
        from fl_patch.activation.startup import activate

        activate(bootstrap)  # nothing when the bootstrap already ran at this interpreter's start
    following = os.environ.get(NEXT_HOOK, "").strip()
    if following:
        module, _, name = following.rpartition(".")
        getattr(importlib.import_module(module), name)()


def main(argv: list[str] | None = None) -> int:
    """``python -m fl_patch.job.ray [JSON]``: the runtime_env JSON (merged into JSON, a runtime_env, if given)."""
    args = sys.argv[1:] if argv is None else argv
    base = json.loads(args[0]) if args else None
    print(json.dumps(runtime_env(base), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
