"""The process's fl_patch state, in one object: ``RUNTIME``.

Everything fl_patch keeps for the life of a process lives here: the settings read at
installation, the registry, the engine and the finder while installed, the start-up
trigger while armed, the child-launch watch, report mode's call counts. Modules
define behaviour; this holds state. One place means one thing to renew after
``fork`` (every lock: a lock another thread held at fork time would stay held forever
in the child, and its ``install()`` would hang) and one thing for tests to reset.

Importing this module is cheap, because the bootstrap imports it at the start-up of
every Python process: the registry and the engine are created on first use.
"""

from __future__ import annotations

import _thread
import os
import sys

# Not ``from typing import TYPE_CHECKING``: importing typing costs ~3 ms at the start-up
# of every process that has the bootstrap on PYTHONPATH. Type checkers read this as theirs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from fl_patch.config.settings import Settings
    from fl_patch.core.errors import ProblemSink
    from fl_patch.core.registry import Registry
    from fl_patch.engine.engine import Engine

__all__ = ["RUNTIME", "ChildWatchState", "Runtime", "StrictState"]


class ChildWatchState:
    """``host/children.py``: which bootstrap directories are ours, whether launches are watched, what was said."""

    def __init__(self) -> None:
        self.bootstrap_dirs: set[str] = set()
        self.hooked = False  # subprocess/os/multiprocessing launches wrapped
        self.via_pythonpath: bool | None = None  # this process was reached through PYTHONPATH (None: not known yet)
        self.warned: set[tuple[str, str]] = set()  # (executable, cause) said once


class StrictState:
    """``host/strict.py``: strict mode's excepthook and exit check in this process."""

    def __init__(self) -> None:
        self.previous_hook: Any = None  # sys.excepthook before strict mode's
        self.registered = False  # its exit check is in atexit's list
        self.armed = False  # strict mode is on in this installation: the check acts


class Runtime:
    def __init__(self) -> None:
        self.lock = _thread.RLock()  # install(), uninstall(), loading sources
        self.settings: Settings | None = None
        self.finder: Any = None  # the PatchingFinder in sys.meta_path while installed
        self.gpu_only_finder: Any = None  # the GpuOnlyFinder, last in sys.meta_path while installed
        self.path_hook: Any = None  # its watchdog in sys.path_hooks (hooks._watchdog)
        self.sources_loaded = False  # packs and FL_PATCH_REGISTRY modules imported
        self.missing_registries: list[str] = []  # FL_PATCH_REGISTRY modules not found at install: again with megatron
        self.trigger: Any = None  # _startup's activation trigger in sys.meta_path
        self.import_hook: Any = None  # _startup's builtins.__import__ while armed
        self.cuda_use: Any = None  # activation/cuda_use.py's CudaUseWatch: the transfer at a set_device before megatron
        self.launcher_cwd_entry: str | None = None  # the sys.path entry `python -m fl_patch` took off (host/cwd.py)
        self.bootstrap_ran = False  # _startup.activate() ran in this process
        self.child_watch: Any = None  # _children.ChildWatch, once launches are watched
        self.call_counts: Any = None  # _exit_report.CallCounts in report mode
        self.report_sink: Any = None  # job.report.JobReport: the exit report merged through the job's store
        self.exit_check = False  # _strict's exit check registered
        self.flagscale_configured = False  # the engine asks a FlagScale tree's platform detection
        self.children = ChildWatchState()
        self.strict = StrictState()
        self.gloo_exit_registered = False  # host/gloo_exit.py's atexit handler
        self.ray_watch = {"told": False, "wrapped": False}  # host/ray_watch.py: said once, ray.actor wrapped
        self.gpu_only_served: dict[str, list[str]] = {}  # host/gpu_only.py: package -> megatron modules served
        self.gpu_only_live: list[str] = []  # host/gpu_only.py: roots of stand-ins now in sys.modules
        self.vendor_typos: set[str] = set()  # activation/install.py: MG_FL_PREFER typos said at start
        self.entry_points_loaded: set[str] = set()  # sources: "name = value" of each entry point loaded
        self._registry: Registry | None = None
        self._problems: ProblemSink | None = None
        self._engine: Engine | None = None

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            from fl_patch.core.registry import Registry  # before the lock: never import while holding it

            with self.lock:
                if self._registry is None:
                    self._registry = Registry()
        return self._registry

    @property
    def problems(self) -> ProblemSink:
        if self._problems is None:
            # Before the lock: never import while holding it. A core ProblemSink that adds the user's failing
            # line to what it reports while an exception is handled (an impl that raised as it imported).
            from fl_patch.core.located import LocatedProblemSink

            with self.lock:
                if self._problems is None:
                    self._problems = LocatedProblemSink()
        return self._problems

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            from fl_patch.engine.engine import Engine  # before the lock: never import while holding it

            registry, problems = self.registry, self.problems
            with self.lock:
                if self._engine is None:
                    self._engine = Engine(registry, problems)
        return self._engine

    @property
    def installed(self) -> bool:
        return self._engine is not None and self._engine.installed

    def after_fork_in_child(self) -> None:
        # Every lock: one another thread held at fork time would stay held forever in the child.
        self.lock = _thread.RLock()
        for part in (self._registry, self._problems, self._engine):
            if part is not None:
                part.after_fork_in_child()
        import_state = sys.modules.get("fl_patch.core.import_state")  # (never imported for this)
        if import_state is not None:
            import_state.after_fork_in_child()


RUNTIME = Runtime()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=RUNTIME.after_fork_in_child)
