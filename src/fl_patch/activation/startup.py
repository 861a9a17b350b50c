"""What the bootstrap ``sitecustomize`` calls at interpreter start-up: arm, don't install.

Every Python process with the bootstrap on ``PYTHONPATH`` runs this: torchrun's agent,
compile workers, ``pip``, a shell's ``python -c``. Most never import megatron, so at
start-up fl_patch only *arms* itself: one small ``sys.meta_path`` entry (and the child
watch). fl_patch installs, and that very import then goes through the patching
finder, at the first import of

* a ``megatron`` module, or of a package named in ``FL_PATCH_TRIGGERS``;
* anything at all once start-up is over, when the user named registry modules
  (``FL_PATCH_REGISTRY`` / ``--registry``): their targets may be anywhere, and by
  then ``sys.path`` holds the script's directory, where such a module often lives.

A process that never does either pays for reading a few environment variables and
this module: neither the engine, nor wrapt, nor torch is imported.

Installing happens inside ``find_spec`` of the triggering import, and installing may
import anything (a registry module may import megatron itself). If that loads the
very module being found, it is not loaded a second time: the trigger hands the
import system the module that now exists (``_LoadedModule``).

Targets outside megatron whose modules were imported before activation
(``torch.Tensor.cuda``, say) are patched then, on the spot, and the report says so
("applied after import").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from fl_patch.activation.runtime import RUNTIME
from fl_patch.activation.settings import ENV, strict_requested
from fl_patch.core.errors import FlPatchError, is_stop_request, warn

__all__ = ["activate", "armed"]


class _ActivationTrigger:
    """A ``sys.meta_path`` entry that installs fl_patch at the first import that needs it."""

    def __init__(self, roots: frozenset[str], after_site: bool) -> None:
        self.roots = roots
        self.after_site = after_site
        self.armed = True

    @property
    def fl_patch_inert(self) -> bool:
        """Disarmed, it takes no import: the patching finder may stay behind it."""
        return not self.armed

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not self.armed:
            return None
        if fullname.partition(".")[0] not in self.roots and not (self.after_site and not _site_running()):
            return None
        # Disarm, but stay in sys.meta_path: removing an entry while the import system
        # iterates over the list would make this very import skip the entry after it.
        self.armed = False
        try:
            finder = _install(fullname)
        except BaseException as exc:
            if is_stop_request(exc):
                self.armed = True  # interrupted: the next such import tries again
            raise
        loaded = sys.modules.get(fullname)
        if loaded is not None:  # installing imported it (a registry did): do not load it again
            # importlib's _find_spec answers an import whose module appeared meanwhile with
            # that module's own __spec__, then loads it again from it: so the module's spec
            # is ours until the import system has taken the module back.
            spec = ModuleSpec(fullname, _LoadedModule(loaded), origin=getattr(loaded, "__file__", None))  # type: ignore[arg-type]  # a duck-typed loader
            loaded.__spec__ = spec
            return spec
        if finder is None:
            return None
        # install() put the patching finder at the front of sys.meta_path, behind the
        # position the import system is at: hand it this import ourselves.
        return finder.find_spec(fullname, path, target)  # type: ignore[attr-defined]

    def invalidate_caches(self) -> None:
        pass


class _ArmedPathHook:
    """A ``sys.path_hooks`` entry that installs fl_patch when megatron's directories are first searched.

    Another import hook put ahead of the trigger (``typeguard.install_import_hook(["megatron"])``
    in a program's first lines) answers every megatron import itself, so the trigger never
    sees one. But that hook too asks the path-based finder for the spec, and the path
    finder consults the path hooks at the first search in each new directory: a
    directory named after a trigger package (``.../megatron``) installs fl_patch there,
    which puts the patching finder first for every import after it. It declines every
    path (``ImportError``, the protocol's "not mine").
    """

    def __init__(self, trigger: _ActivationTrigger) -> None:
        self.trigger = trigger

    def __call__(self, path: str) -> object:
        trigger = self.trigger
        if trigger.armed and not _site_running() and _inside_loaded_root(str(path), trigger.roots):
            trigger.armed = False
            try:
                _install(str(path))
            except BaseException as exc:
                if is_stop_request(exc):
                    trigger.armed = True
                raise
        raise ImportError("fl_patch's start-up path hook handles no path")


def _inside_loaded_root(path: str, roots: frozenset[str]) -> bool:
    """Whether ``path`` is searched as (a directory inside) a trigger package that has been imported.

    That is the evidence the path hook acts on: the import system searches a directory of
    ``megatron.__path__`` only to import a submodule of the ``megatron`` package it already
    imported. A directory merely *named* ``megatron`` is no evidence: a script in
    ``~/megatron/``, a venv or data directory called ``megatron``, a ``sys.path`` entry under
    ``/x/megatron/...`` are searched for every import (``import torch`` included), and
    installing there (inside the search for ``torch``, which installing may import: torch
    was then imported twice, ``RuntimeError: Only a single TORCH_LIBRARY ...``) patched
    programs that never touch megatron.
    """
    for root in roots:
        package = sys.modules.get(root)
        locations = getattr(package, "__path__", None)
        if locations is None:
            continue
        try:
            entries = [os.path.abspath(entry) for entry in list(locations)]
        except TypeError:  # a __path__ that is not a list of strings: no evidence
            continue
        here = os.path.abspath(path)
        if any(here == entry or here.startswith(entry + os.sep) for entry in entries):
            return True
    return False


class _StartedWhileLoading:
    """In a process started while its parent loaded registries: says so if megatron is imported here."""

    def __init__(self, parent: str) -> None:
        self.parent = parent
        self.fired = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if self.fired or fullname.partition(".")[0] != "megatron":
            return None
        self.fired = True
        message = (
            f"fl_patch: this process (pid {os.getpid()}) was started by plugin code while process {self.parent} "
            "was loading fl_patch's registries (a registry that probes the machine in a Python subprocess, say); "
            "it does not load them again (that would start such a process without end), so megatron runs here "
            f"unpatched ({ENV.LOADING}={self.parent})"
        )
        if strict_requested():
            raise FlPatchError(message)
        warn(message, stacklevel=3)
        return None

    def invalidate_caches(self) -> None:
        pass


class _LoadedModule:
    """A loader that hands the import system a module that already exists, and runs nothing."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.real_spec = module.__spec__
        self.real_loader = getattr(module, "__loader__", None)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.real_spec  # the module as it was loaded, for everyone after
        if self.real_loader is not None:
            module.__loader__ = self.real_loader


def _site_running() -> bool:
    """Whether ``site`` (so ``sitecustomize``) is still running: interpreter start-up."""
    site = sys.modules.get("site")
    return bool(getattr(getattr(site, "__spec__", None), "_initializing", False))


def armed() -> bool:
    trigger = RUNTIME.trigger
    return trigger is not None and trigger.armed


def activate(bootstrap_dir: str) -> None:
    """Arm fl_patch for this process; never raises.

    A problem becomes one ``FlPatchWarning`` and the program runs without (some)
    patches. With ``FL_PATCH_STRICT=1`` the message goes to stderr and the process
    exits with status 1 before the program starts: strict means a job never runs
    on a configuration that was asked for and not delivered. (``SystemExit`` raised
    inside ``site`` is a fatal interpreter error with a traceback, hence ``os._exit``.)
    """
    if RUNTIME.bootstrap_ran:
        return  # a second bootstrap copy (the template and the launcher's, say) does nothing
    RUNTIME.bootstrap_ran = True
    try:
        from fl_patch.activation.settings import Settings, pin_report_file

        pin_report_file()  # before any child is started: they inherit the absolute path
        settings = Settings.from_environ()
        if not settings.enabled:
            return
        loading = os.environ.get(ENV.LOADING, "")
        if loading and loading != str(os.getpid()):
            # Started by plugin code while its parent was loading it (sources.loading): loading
            # the same registries here would start another such child, without end.
            sys.meta_path.insert(0, _StartedWhileLoading(loading))
            return
        if settings.strict:
            from fl_patch.activation.strict import register_exit_check

            # Before the program's first line: its atexit handlers, registered later, run before
            # strict mode's exit check, which may end the process (activation/strict.py).
            register_exit_check()
        from fl_patch.activation.gloo_exit import settle_gloo_workers_at_exit

        # Also before the program's first line, so that it runs after the program's own handlers
        # (its destroy_process_group, say): a torch gloo race at exit (activation/gloo_exit.py).
        settle_gloo_workers_at_exit()
        if settings.watch_children:
            from fl_patch.activation.children import watch
            from fl_patch.job.ray_watch import watch as watch_ray_actors

            watch(bootstrap_dir)
            watch_ray_actors()  # a Ray actor this driver starts without fl_patch is named (job/ray_watch.py)
        roots = frozenset({"megatron", *(name.partition(".")[0] for name in settings.triggers)})
        if any(name.partition(".")[0] in roots for name in list(sys.modules)):
            _install()  # a trigger package is loaded already (by another sitecustomize, say)
            return
        RUNTIME.trigger = _ActivationTrigger(roots, after_site=bool(settings.registry_modules))
        sys.meta_path.insert(0, RUNTIME.trigger)
        # (the hook finds nothing: it always raises ImportError, after installing when it is due)
        sys.path_hooks.insert(0, _ArmedPathHook(RUNTIME.trigger))  # type: ignore[arg-type]
    except Exception as exc:  # (start-up must survive a broken plugin or a bug of ours)
        if is_stop_request(exc):
            raise
        _report(exc, "fl_patch could not arm itself in this process")


def _install(first: str | None = None) -> object | None:
    """Install fl_patch; return its finder (None if it is off or could not install).

    Not at interpreter shutdown: an import there (an atexit handler's ``import
    megatron.core``) gets one warning that it is too late, and runs as plain python runs it.
    """
    from fl_patch.core.vendors import interpreter_shutting_down  # here: start-up stays light

    if interpreter_shutting_down():
        what = f"{first!r} was first imported" if first else "the first import fl_patch waits for came"
        warn(
            f"fl_patch: {what} while the interpreter shuts down (in an atexit handler, say): too late to "
            "activate fl_patch (imports that start threads fail from here on); it runs unpatched",
            stacklevel=3,
        )
        return None
    try:
        from fl_patch.activation.install import current_finder, install

        if not install():
            return None  # FL_PATCH=0 (read again by the engine's own settings)
        return current_finder()
    except FlPatchError:
        if strict_requested():
            raise  # inside an import: the import fails with the message, as strict asks
        return None
    except Exception as exc:  # a bug of ours must not break the program's import
        if is_stop_request(exc):
            raise
        message = f"fl_patch could not activate in this process: {type(exc).__name__}: {exc}"
        if strict_requested():
            raise FlPatchError(message) from exc
        warn(message, stacklevel=3)
        return None


def _report(exc: BaseException, what: str) -> None:
    message = str(exc) if isinstance(exc, FlPatchError) else f"{what}: {type(exc).__name__}: {exc}"
    if strict_requested():
        _stop(message)
    warn(message, stacklevel=3)


def _stop(message: str) -> None:
    try:
        sys.stderr.write(f"{message}\n(FL_PATCH_STRICT=1: start-up stops)\n")
        sys.stderr.flush()
    finally:
        os._exit(1)
