"""``install()`` and ``uninstall()``: idempotent, and exact inverses.

``install()`` reads the environment, loads the registry sources, puts the finder
first in ``sys.meta_path`` (with a watchdog in ``sys.path_hooks`` that puts it back if
something takes it out) and patches what is already imported (recorded as *late*: the
report says the program imported megatron before activation). ``uninstall()`` takes
both out and restores every original, aliases included. Registrations survive both: a
second ``install()`` re-applies them.

Interrupted (Ctrl-C while a registry loads), ``install()`` leaves nothing half done: the
finder is taken out again and the sources are loaded afresh by the next ``install()``.

``load_sources()`` loads every registration source, deferred ones included, without
installing anything (``--list``, ``--check``).
"""

from __future__ import annotations

import sys
import types

from fl_patch import sources as _sources
from fl_patch.compat.flagscale import tree as _flagscale
from fl_patch.config.settings import (
    ENV,
    Settings,
    enabled,
    malformed_values,
    misspelled_names,
    pin_report_file,
    unrecognised_values,
)
from fl_patch.config.suggest import closest
from fl_patch.config.vendors import KNOWN_VENDORS
from fl_patch.core.errors import warn
from fl_patch.core.import_state import plugin_window
from fl_patch.hooks import PatchingFinder, PathHookWatchdog
from fl_patch.host.gloo_exit import settle_gloo_workers_at_exit
from fl_patch.host.gloo_exit import withdraw as withdraw_gloo_exit_settle
from fl_patch.host.gpu_only import GpuOnlyFinder
from fl_patch.host.gpu_only import release as gpu_only_release
from fl_patch.runtime import RUNTIME

__all__ = ["current_finder", "install", "is_installed", "load_pack_now", "load_sources", "uninstall"]


def _load_deferred_sources() -> None:
    engine = RUNTIME.engine
    settings = engine.settings
    try:
        if RUNTIME.missing_registries:
            # Not on sys.path at install (a tool this process is, whose path does not reach the job's
            # directory; or a program that extends sys.path before importing megatron): megatron
            # loads now, so now it is the job's problem, said once (strict: this import stops).
            names, RUNTIME.missing_registries = tuple(RUNTIME.missing_registries), []
            _sources.load_registry_modules(names, RUNTIME.registry, RUNTIME.problems)
        if not _packs_named(settings):
            # Every shipped pack (nobody named one): only now that megatron itself loads, and first,
            # so that their torch targets are in place before megatron's own modules run.
            _withdraw_cuda_use()
            _sources.load_packs(None, RUNTIME.registry, RUNTIME.problems)
        if settings.entry_points:
            _sources.load_entry_points(RUNTIME.registry, RUNTIME.problems, done=RUNTIME.entry_points_loaded)
        if settings.flagscale_tree:
            _flagscale.load_tree(RUNTIME.registry, RUNTIME.problems, engine, hooked=engine.installed)
        if settings.rank_check != "off":
            # fl_patch's own registration: ranks compare their patches as process groups are created (job/).
            _sources.import_source("fl_patch.job.registry", "rank check", RUNTIME.registry, RUNTIME.problems)
    except BaseException:
        # Interrupted (Ctrl-C, the program's signal handler, a strict error) and the program may
        # go on: what did not load yet loads at the next trigger, instead of never (the engine
        # dropped this callable before calling it). Sources that did load are not loaded twice.
        engine.defer(_load_deferred_sources)
        raise
    engine.check_preferred_vendors(already_said=RUNTIME.vendor_typos)
    _check_disabled_keys(settings)


def _check_preferred_near_misses(settings: Settings) -> None:
    known = {*KNOWN_VENDORS, *RUNTIME.registry.vendors()}
    for vendor in settings.prefer:
        meant = None if vendor in known else closest(vendor, sorted(known))
        if meant is not None:
            RUNTIME.vendor_typos.add(vendor)
            # Pointed at the setting, not at this line: the user's mistake is there (--vendor sets it too).
            RUNTIME.problems.problem(
                f"fl_patch: MG_FL_PREFER (--vendor) names vendor {vendor!r}, which no registration or platform has: "
                f"did you mean {meant!r}? ({vendor!r} is ignored)",
                where=(f"<MG_FL_PREFER={','.join(settings.prefer)}>", 0),
            )


def _check_disabled_keys(settings: Settings) -> None:
    """A ``--disable`` / ``FL_PATCH_DISABLE`` key that matches no registration disables nothing: say so.

    Checked when every source has loaded (the deferred ones run at the first megatron
    import), against the targets and FlagScale method keys registered.
    """
    if not settings.disabled_targets:
        return
    names = {name for target in RUNTIME.registry.targets() for name in (target.name, target.method_key)}
    for key in sorted(settings.disabled_targets - names):
        meant = closest(key, sorted(names))
        hint = f"did you mean {meant!r}?" if meant else "no registered target or method key has that name"
        RUNTIME.problems.problem(f"fl_patch: FL_PATCH_DISABLE (--disable) names {key!r}, which matches nothing: {hint}")


def _flagscale_on() -> bool:
    return RUNTIME.settings is not None and RUNTIME.settings.flagscale_tree


def _join_flagscale_tree(decorators: types.ModuleType) -> None:
    if _flagscale_on():
        _flagscale.take_over_on_load(decorators)


def _flagscale_platform() -> str | None:
    return _flagscale.tree_platform() if _flagscale_on() else None


def _configure(settings: Settings) -> None:
    engine = RUNTIME.engine
    if RUNTIME.settings is None:  # once a process: its environment does not change meaning
        for message in (*unrecognised_values(), *misspelled_names()):
            warn(message, stacklevel=4)
    RUNTIME.settings = settings
    engine.configure(settings)
    # fl_patch's megatron.plugin.decorators where none is installed (``from megatron.plugin.decorators
    # import register`` works in any registry), and a FlagScale tree's own joined to fl_patch.
    engine.serve(_flagscale.DECORATORS, "fl_patch.compat.flagscale.decorators")
    if not RUNTIME.flagscale_configured:  # once: both read the settings when they run
        RUNTIME.flagscale_configured = True
        engine.on_load(_flagscale.DECORATORS, _join_flagscale_tree)
        engine.vendor_choice.add_hint(_flagscale_platform)
    modes = _import_modes(settings)
    if "strict" in modes:  # before the report's: atexit runs the report first, then this check
        modes["strict"].arm()
    if "report" in modes:
        modes["report"].enable()
    else:
        _stop_counting(engine)
    if "compare" in modes:
        modes["compare"].enable(settings)
    else:
        _stop_comparing(engine)


def _import_modes(settings: Settings) -> dict[str, types.ModuleType]:
    """The modules of the modes ``settings`` turn on, imported only then (a normal run pays nothing).

    Called before any lock of fl_patch is taken (``install()``): an import while holding one could
    wait for a module lock that another thread holds while it waits for ours.
    """
    modes: dict[str, types.ModuleType] = {}
    if settings.strict:
        from fl_patch.host import strict

        modes["strict"] = strict
    if settings.report_at_exit:
        from fl_patch.reporting import exit_report

        modes["report"] = exit_report
    if settings.compare_calls or settings.compare_steps:
        from fl_patch.compare import mode as compare_mode

        modes["compare"] = compare_mode
    return modes


def _load_eager_sources(settings: Settings, *, registries: bool) -> None:
    if RUNTIME.sources_loaded:
        return
    for message in malformed_values():  # a registry or vendor name that cannot be one: said, not dropped silently
        RUNTIME.problems.problem(message)
    if _packs_named(settings):  # what the user asked for, now
        _withdraw_cuda_use()
        _sources.load_packs(settings.packs, RUNTIME.registry, RUNTIME.problems)
    if registries:
        # A registry module this process cannot find is the job's problem only in the program the
        # launcher runs, or once megatron loads here; pip, `python -c ...`, a compile worker, whose
        # sys.path does not reach the job's directory, are not disturbed (docs/reliability.md,
        # blast radius): it is looked for again when megatron loads (_load_deferred_sources).
        missing: list[str] | None = None if _launched_program() else []
        _sources.load_registry_modules(settings.registry_modules, RUNTIME.registry, RUNTIME.problems, missing=missing)
        RUNTIME.missing_registries = missing or []
    _check_preferred_near_misses(settings)
    RUNTIME.engine.defer(_load_deferred_sources)
    RUNTIME.sources_loaded = True


def _withdraw_cuda_use() -> None:
    """The packs load: torch's own ``set_device`` back in place of the stand-in that would load the transfer early
    (``activation/cuda_use.py``), so that the transfer patches torch's, not the stand-in."""
    if RUNTIME.cuda_use is not None:
        RUNTIME.cuda_use.withdraw()


def load_pack_now(name: str) -> None:
    """Load one shipped pack now and apply it to the modules already loaded (the transfer at a CUDA call before
    megatron, ``activation/cuda_use.py``). Its registrations, loaded again with the other packs, yield to these."""
    with plugin_window():
        _sources.load_packs((name,), RUNTIME.registry, RUNTIME.problems)
    RUNTIME.engine.apply_loaded_modules()


def _packs_named(settings: Settings) -> bool:
    """Whether the user asked for packs before megatron: named them (``FL_PATCH_PACKS``), or named a
    package whose import activates fl_patch (``FL_PATCH_TRIGGERS=torch``: a pure-torch CUDA script
    under the CUDA-on-CPU transfer, whose ``torch.cuda`` targets must be in place as torch loads)."""
    return settings.packs is not None or bool(settings.triggers)


def _launched_program() -> bool:
    """Whether this process is the program ``python -m fl_patch`` runs (it keeps the launcher's pid)."""
    import os

    return os.environ.get(ENV.LAUNCHED) == str(os.getpid())


def install() -> bool:
    """Activate fl_patch in this process; returns False when ``FL_PATCH=0``."""
    if not enabled():
        return False
    engine = RUNTIME.engine
    settings = Settings.from_environ()
    _import_modes(settings)  # imports first, outside our lock (see there)
    with RUNTIME.lock:
        if engine.installed:
            return True
        pin_report_file()
        _configure(settings)
        first = not RUNTIME.sources_loaded
        finder = PatchingFinder(engine, every_import=gpu_only_release)
        RUNTIME.finder = finder
        sys.meta_path.insert(0, finder)
        # Last, so that it is asked only for packages no real finder has (hooks/gpu_only.py).
        RUNTIME.gpu_only_finder = GpuOnlyFinder()
        sys.meta_path.append(RUNTIME.gpu_only_finder)
        RUNTIME.path_hook = PathHookWatchdog(finder, engine)
        sys.path_hooks.insert(0, RUNTIME.path_hook)
        RUNTIME.path_hook.watch_cached()
        settle_gloo_workers_at_exit()  # once per process; a torch gloo race at exit (gloo_exit.py)
        engine.installed = True
    try:
        # The packs and the user's registry modules load with the finder in place and
        # outside our lock: they may import anything, megatron included, and what they
        # import is patched.
        with plugin_window():  # plugin code, maybe inside the import that activated fl_patch
            _load_eager_sources(settings, registries=first)
        if any(name.startswith("megatron.") for name in list(sys.modules)):
            engine.run_deferred()  # megatron is already loaded: no import will trigger it
        engine.apply_loaded_modules()
    except BaseException:
        # Ctrl-C (or a strict error) half-way: take everything out again, so that the
        # next install() starts from the beginning instead of from a half-loaded registry.
        # Strict mode stays armed: its excepthook is what prints the error in flight as one line.
        _uninstall(disarm_strict=False)
        raise
    return True


def current_finder() -> PatchingFinder | None:
    """The patching finder in ``sys.meta_path`` while installed."""
    return RUNTIME.finder if RUNTIME.installed else None


def load_sources() -> None:
    """Load every registration source now, deferred ones included, without installing.

    For ``--list`` and ``--check``: they need every registration, and must not wait
    for a megatron import to discover entry points or a FlagScale plugin tree.
    """
    with RUNTIME.lock:
        if not RUNTIME.installed:
            _configure(Settings.from_environ())
        settings = RUNTIME.engine.settings
    _load_eager_sources(settings, registries=True)
    RUNTIME.engine.run_deferred()


def uninstall() -> bool:
    """Deactivate and restore every original; returns False if it was not installed."""
    return _uninstall(disarm_strict=True)


def _uninstall(*, disarm_strict: bool) -> bool:
    _withdraw_cuda_use()  # torch's own set_device back, if the stand-in is still there
    engine = RUNTIME.engine
    with RUNTIME.lock:
        if not engine.installed:
            return False
        for hooks, hook in (
            (sys.meta_path, RUNTIME.finder),
            (sys.meta_path, RUNTIME.gpu_only_finder),
            (sys.path_hooks, RUNTIME.path_hook),
        ):
            while hook is not None and hook in hooks:
                hooks.remove(hook)
        if RUNTIME.path_hook is not None:
            RUNTIME.path_hook.release_cached()
        RUNTIME.finder = RUNTIME.path_hook = RUNTIME.gpu_only_finder = None
        engine.installed = False
    engine.revert_all()
    strict = sys.modules.get("fl_patch.host.strict")
    if strict is not None and disarm_strict:
        strict.disarm()  # its excepthook and exit check: uninstall leaves nothing of fl_patch behind
    withdraw_gloo_exit_settle()  # the exit handler for torch's gloo race, likewise
    return True


def is_installed() -> bool:
    return RUNTIME.installed


def _reset_for_tests() -> None:
    """Uninstall and forget all registrations, so the next install() starts afresh."""
    uninstall()
    RUNTIME.engine.reset()
    _stop_counting(RUNTIME.engine)
    _stop_comparing(RUNTIME.engine)
    RUNTIME.sources_loaded = False
    # A registry module registers when its body runs: forget the packs' (and the
    # sub-registries they import) so the next install() runs them again; user registry
    # modules are the test's own business.
    for name in [
        n for n in sys.modules if n.startswith(("fl_patch.impls.", "fl_patch.job.")) and n.endswith("registry")
    ]:
        del sys.modules[name]


def _stop_counting(engine: object) -> None:
    exit_report = sys.modules.get("fl_patch.reporting.exit_report")
    if exit_report is not None:
        engine.remove_wrap(exit_report.make_counter)  # type: ignore[attr-defined]


def _stop_comparing(engine: object) -> None:
    compare_mode = sys.modules.get("fl_patch.compare.mode")
    if compare_mode is not None:
        compare_mode.disable(engine)
