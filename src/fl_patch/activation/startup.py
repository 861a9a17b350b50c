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

Installing never happens inside ``find_spec`` (nor a path hook): CPython calls those holding
its global import lock, and installing imports the packs and the user's registries, which
may import anything and wait on threads that import (another thread's import then waits
for that lock while this one waits for it: a hang). The trigger's ``find_spec`` only hands
the import system the module's real spec with an installing loader; the loader installs
(holding only that module's lock) and then runs the body through the patching finder's
loader, so the triggering module is patched like any other. If installing imports that
very module (a registry that imports megatron), it is not loaded a second time.

Targets outside megatron whose modules were imported before activation
(``torch.Tensor.cuda``, say) are patched then, on the spot, and the report says so
("applied after import").
"""

from __future__ import annotations

import builtins
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec

try:
    from importlib.machinery import NamespaceLoader as _NamespaceLoader  # Python 3.11+
except ImportError:  # Python 3.10
    from importlib._bootstrap_external import _NamespaceLoader
from types import ModuleType
from typing import Any

from fl_patch.config.settings import ENV, strict_requested
from fl_patch.core.errors import FlPatchError, is_stop_request, warn
from fl_patch.runtime import RUNTIME

__all__ = ["activate", "armed"]


class _ActivationTrigger:
    """A ``sys.meta_path`` entry that installs fl_patch at the first import that needs it.

    ``find_spec`` runs under the interpreter's global import lock, so it only decides: it finds
    the module's real spec (asking the finders behind it) and hands the import system that spec
    with an ``_InstallingLoader``. Installing (reading the environment, importing the packs and
    the user's registries, which may import anything and wait on threads that import) happens in
    that loader, where CPython holds only this one module's lock.
    """

    def __init__(self, roots: frozenset[str], after_site: bool) -> None:
        self.roots = roots
        self.after_site = after_site
        self.armed = True
        self.due = False  # the path hook saw megatron searched past us: install at the next import

    @property
    def fl_patch_inert(self) -> bool:
        """Disarmed, it takes no import: the patching finder may stay behind it."""
        return not self.armed

    def wants(self, fullname: str) -> bool:
        """Whether importing ``fullname`` now installs fl_patch."""
        return self.due or fullname.partition(".")[0] in self.roots or (self.after_site and not _site_running())

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not self.armed or not self.wants(fullname):
            return None
        spec = _real_spec(self, fullname, path, target)
        if spec is None or (spec.loader is None and spec.submodule_search_locations is None):
            return None  # not found here (its ImportError is the program's): wait for the next import
        # Disarm, but stay in sys.meta_path: removing an entry while the import system
        # iterates over the list would make this very import skip the entry after it.
        self.armed = False
        spec.loader = _InstallingLoader(fullname, spec, self)  # type: ignore[assignment]  # a duck-typed loader
        return spec

    def invalidate_caches(self) -> None:
        pass


class _ImportStatementHook:
    """``builtins.__import__`` while armed: installs at an ``import`` statement, before any import lock.

    Every import holds the module lock of the name it imports while it imports the parents
    (``import megatron.core.utils`` holds ``megatron.core.utils``'s lock while ``megatron`` loads).
    Installing anywhere inside the import machinery would therefore hang a registry that waits on a
    worker thread importing that very name. CPython calls ``builtins.__import__`` for an ``import``
    statement before it takes any lock, so that is where the trigger installs; it puts the previous
    ``__import__`` back at once. (Imports through ``importlib.import_module`` do not pass here: the
    meta-path trigger takes those, in the loader.)

    Its cost while armed: one Python call per ``import`` statement (a dict lookup and a return for
    a module already loaded). ``bench/startup.py`` measures it.
    """

    def __init__(self, trigger: _ActivationTrigger, previous: Any) -> None:
        self.trigger = trigger
        self.previous = previous

    def __call__(
        self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> ModuleType:
        trigger = self.trigger
        if level == 0 and trigger.armed and name not in sys.modules and trigger.wants(name):
            self.withdraw()
            trigger.armed = False
            try:
                _install(name)
            except BaseException as exc:
                if is_stop_request(exc):
                    trigger.armed = True
                raise
        module = self.previous(name, globals, locals, fromlist, level)
        watch = RUNTIME.cuda_use
        if watch is not None and not watch.finished:
            watch.after_import()  # torch.cuda loaded: its set_device brings the transfer (activation/cuda_use.py)
            if watch.finished and not trigger.armed:
                self.withdraw()
        return module

    def withdraw(self) -> None:
        """Out of ``builtins.__import__``, unless the CUDA-use watch still waits for ``torch.cuda`` to load."""
        watch = RUNTIME.cuda_use
        if watch is not None and not watch.finished:
            return  # (it withdraws once the watch has placed its stand-in: __call__)
        if builtins.__import__ is self:
            builtins.__import__ = self.previous


def _real_spec(
    finder: object, fullname: str, path: Sequence[str] | None, target: ModuleType | None
) -> ModuleSpec | None:
    """The spec the finders behind ``finder`` give (never importlib.util.find_spec: it re-enters them all)."""
    for entry in list(sys.meta_path):
        if entry is finder or getattr(entry, "fl_patch_inert", None) is not None:
            continue
        find_spec = getattr(entry, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


class _InstallingLoader:
    """Installs fl_patch, then loads its module through the patching finder's loader.

    Where in the import: the earliest point at which CPython holds only this module's lock.

    - A module with a body: in ``create_module``, before the module exists in ``sys.modules``.
      If installing imports this very module (a registry that imports what the program imports
      first), that import loads it fully, and ``create_module`` hands the import system that
      module, which is then not run a second time.
    - A namespace package (``megatron`` itself: it has no ``__init__.py``): in ``exec_module``,
      once the (empty, complete) package is in ``sys.modules`` with its ``__path__``. Threads the
      install starts (a registry probing the machine in a worker it joins) can then import below
      it; the plugin window (core.import_state) lets them past its import lock.
    """

    def __init__(self, fullname: str, spec: ModuleSpec, trigger: _ActivationTrigger) -> None:
        self.fullname = fullname
        self.real_loader = spec.loader
        self.trigger = trigger
        # (a namespace package's spec has no loader: CPython makes one for it when it loads)
        self.namespace = spec.loader is None and spec.submodule_search_locations is not None
        self._finder: object | None = None
        self._delegate: object = spec.loader
        self._loaded: ModuleType | None = None
        self._loaded_spec: object = None
        self._loaded_loader: object = None

    def _install(self) -> None:
        try:
            self._finder = _install(self.fullname)
        except BaseException as exc:
            if is_stop_request(exc):
                self.trigger.armed = True  # interrupted: the next such import tries again
            raise

    def _take_over(self, spec: ModuleSpec) -> None:
        """The patching finder is in place now: its loader runs the body and patches it."""
        if self._finder is None:
            return
        plain = ModuleSpec(self.fullname, self.real_loader, origin=spec.origin)
        plain.submodule_search_locations = spec.submodule_search_locations
        hooked = self._finder.hooked(self.fullname, plain)  # type: ignore[attr-defined]
        if hooked is not None and hooked.loader is not None:
            self._delegate = hooked.loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        if not self.namespace:
            self._install()
            loaded = sys.modules.get(self.fullname)
            if loaded is not None:  # installing imported it (a registry did): do not load it again
                self._loaded = loaded
                self._loaded_spec = getattr(loaded, "__spec__", None)
                self._loaded_loader = getattr(loaded, "__loader__", None)
                return loaded
            self._take_over(spec)
        create = getattr(self._delegate, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        if self._loaded is not None and module is self._loaded:
            # The module as it was loaded, for everyone after (the import system stamped our spec on it).
            if self._loaded_spec is not None:
                module.__spec__ = self._loaded_spec  # type: ignore[assignment]
            if self._loaded_loader is not None:
                module.__loader__ = self._loaded_loader  # type: ignore[assignment]
            return
        # Everyone after sees the real loader (inspect.getsource, resources), as without fl_patch.
        if getattr(module, "__loader__", None) is self and not self.namespace:
            module.__loader__ = self.real_loader
        if getattr(module.__spec__, "loader", None) is self and not self.namespace:
            module.__spec__.loader = self.real_loader  # type: ignore[union-attr]
        if self.namespace:
            # The loader CPython gives a namespace package when its spec has none (as _bootstrap does).
            loader = _NamespaceLoader.__new__(_NamespaceLoader)
            loader._path = module.__spec__.submodule_search_locations  # type: ignore[attr-defined, union-attr]
            module.__loader__ = module.__spec__.loader = loader  # type: ignore[union-attr]
            self._install()
            return
        self._delegate.exec_module(module)  # type: ignore[attr-defined]


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
            # Path hooks run under the interpreter's global import lock: only note it. The trigger
            # installs at the next import that reaches it, in that import's loader.
            trigger.due = True
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
        from fl_patch.config.settings import Settings, pin_report_file

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
            from fl_patch.host.strict import register_exit_check

            # Before the program's first line: its atexit handlers, registered later, run before
            # strict mode's exit check, which may end the process (activation/strict.py).
            register_exit_check()
        from fl_patch.host.gloo_exit import settle_gloo_workers_at_exit

        # Also before the program's first line, so that it runs after the program's own handlers
        # (its destroy_process_group, say): a torch gloo race at exit (activation/gloo_exit.py).
        settle_gloo_workers_at_exit()
        if settings.watch_children:
            from fl_patch.host.children import watch
            from fl_patch.host.ray_watch import watch as watch_ray_actors

            watch(bootstrap_dir)
            watch_ray_actors()  # a Ray actor this driver starts without fl_patch is named (host/ray_watch.py)
        roots = frozenset({"megatron", *(name.partition(".")[0] for name in settings.triggers)})
        if any(name.partition(".")[0] in roots for name in list(sys.modules)):
            _install()  # a trigger package is loaded already (by another sitecustomize, say)
            return
        from fl_patch.activation import cuda_use

        if cuda_use.wanted(settings):
            RUNTIME.cuda_use = cuda_use.CudaUseWatch(_install_with_transfer)
            RUNTIME.cuda_use.after_import()  # torch.cuda may be loaded already (another sitecustomize)
        RUNTIME.trigger = _ActivationTrigger(roots, after_site=bool(settings.registry_modules))
        RUNTIME.import_hook = _ImportStatementHook(RUNTIME.trigger, builtins.__import__)
        builtins.__import__ = RUNTIME.import_hook
        sys.meta_path.insert(0, RUNTIME.trigger)
        # (the hook finds nothing: it always raises ImportError, after installing when it is due)
        sys.path_hooks.insert(0, _ArmedPathHook(RUNTIME.trigger))  # type: ignore[arg-type]
    except Exception as exc:  # (start-up must survive a broken plugin or a bug of ours)
        if is_stop_request(exc):
            raise
        _report(exc, "fl_patch could not arm itself in this process")


def _install_with_transfer() -> object | None:
    """Install fl_patch now, with the CUDA-on-CPU transfer's pack: the program calls ``torch.cuda.set_device``
    before megatron on a machine without CUDA (``activation/cuda_use.py``)."""
    from fl_patch.activation.cuda_use import PACK
    from fl_patch.activation.install import load_pack_now

    trigger = RUNTIME.trigger
    if trigger is not None:
        trigger.armed = False  # installed from here on: no import installs again
    finder = _install("torch.cuda")
    if finder is not None:
        load_pack_now(PACK)
    return finder


def _install(first: str | None = None) -> object | None:
    """Install fl_patch; return its finder (None if it is off or could not install).

    Not at interpreter shutdown: an import there (an atexit handler's ``import
    megatron.core``) gets one warning that it is too late, and runs as plain python runs it.
    """
    from fl_patch.core.vendors import interpreter_shutting_down  # here: start-up stays light

    if RUNTIME.import_hook is not None:
        RUNTIME.import_hook.withdraw()  # armed no more, whichever trigger fired: import statements cost nothing again

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
