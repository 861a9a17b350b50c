"""The environment variables fl_patch reads, in one place.

They are read when ``install()`` runs (and by the CLI), then kept in a frozen
``Settings``: a process sees one consistent configuration even if something edits
``os.environ`` mid-run. Child processes inherit the variables, which is how the
CLI's options reach torchrun workers and multiprocessing children.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

from fl_patch.config.suggest import closest

__all__ = [
    "DEFAULT_COMPARE_CALLS",
    "ENV",
    "FILTER_KEYS",
    "Settings",
    "compare_calls",
    "enabled",
    "malformed_values",
    "misspelled_names",
    "pin_report_file",
    "read_list",
    "report_filters",
    "strict_requested",
    "switch_value",
    "unrecognised_values",
]


class ENV:
    """Names of the variables (so a typo is a NameError, not a silent no-op)."""

    ENABLED = "FL_PATCH"  # "0"/"false"/"off": fl_patch does nothing at all
    STRICT = "FL_PATCH_STRICT"  # "1": any patch problem is an error
    DISABLE = "FL_PATCH_DISABLE"  # targets or method keys to skip, comma-separated
    REGISTRY = "FL_PATCH_REGISTRY"  # registry modules to import, comma-separated
    PACKS = "FL_PATCH_PACKS"  # shipped packs to enable ("none", or names); default: all
    PREFER = "MG_FL_PREFER"  # vendor priority list, FlagScale's variable
    REPORT = "FL_PATCH_REPORT"  # "1": print a report at exit (counts calls)
    REPORT_FILE = "FL_PATCH_REPORT_FILE"  # a path: append the exit report there as JSON (implies REPORT)
    REPORT_ALL = "FL_PATCH_REPORT_ALL"  # "1": the report lists the packs' rows too (--report --all)
    REPORT_ONLY = "FL_PATCH_REPORT_ONLY"  # KEY=VALUE[,KEY=VALUE]: the report's rows that match (--report --only)
    CHILDREN = "FL_PATCH_CHILDREN"  # "0": do not watch for child processes fl_patch cannot reach
    BOOTSTRAP = "FL_PATCH_BOOTSTRAP"  # set by the launcher: the bootstrap dir it put on PYTHONPATH
    ENTRY_POINTS = "FL_PATCH_ENTRY_POINTS"  # "0": ignore installed entry points
    FLAGSCALE = "FL_PATCH_FLAGSCALE"  # "0": ignore a FlagScale-style plugin tree
    TRIGGERS = "FL_PATCH_TRIGGERS"  # packages whose first import activates fl_patch, besides megatron
    TRACEBACK = "FL_PATCH_TRACEBACK"  # "1": strict errors are shown with their traceback
    CUDA_ON_CPU = "FL_PATCH_CUDA_ON_CPU"  # "0": no CUDA-on-CPU transfer where there is no GPU (the cuda_on_cpu pack)
    LAUNCHED = "FL_PATCH_LAUNCHED"  # set by the launcher: the pid of the program it runs (exec keeps the pid)
    SAID = "FL_PATCH_SAID"  # the packs' notices said in this job (children do not repeat them); "*": none
    START_DIR = "FL_PATCH_START_DIR"  # set by the launcher: its cwd, where registry modules are looked for last
    LOADING = "FL_PATCH_LOADING"  # set while a process loads registries: the children it starts meanwhile skip them
    COMPARE = "FL_PATCH_COMPARE"  # N: the first N calls of each patch also run upstream's original, compared
    COMPARE_JSON = "FL_PATCH_COMPARE_JSON"  # a path: append the compare records there as JSON lines (implies COMPARE)
    COMPARE_STEPS = "FL_PATCH_COMPARE_STEPS"  # set by `fl-patch compare`: append each step's loss and grad norm there
    RANK_CHECK = "FL_PATCH_RANK_CHECK"  # "warn" / "off": ranks whose patches differ are a warning / not compared (job/)
    RANK_CHECK_TIMEOUT = "FL_PATCH_RANK_CHECK_TIMEOUT"  # seconds the rank check waits for every rank (default 300)
    RAY_NEXT_HOOK = "FL_PATCH_RAY_NEXT_HOOK"  # set by fl_patch.job.ray.runtime_env: the user's own Ray setup hook


_SWITCHES = (
    ENV.ENABLED,
    ENV.STRICT,
    ENV.REPORT,
    ENV.CHILDREN,
    ENV.ENTRY_POINTS,
    ENV.FLAGSCALE,
    ENV.TRACEBACK,
    ENV.CUDA_ON_CPU,
    ENV.REPORT_ALL,
)

# What ``--only KEY=VALUE`` (``--list``, ``--check``, ``--report``) may filter on.
FILTER_KEYS = ("vendor", "source", "status", "target", "pack")


# Every variable fl_patch reads: a name in the environment one or two typing slips away
# from one of these was meant as it (``FL_PATCH_STICT=1`` would otherwise do nothing).
KNOWN_NAMES = tuple(value for key, value in vars(ENV).items() if key.isupper() and isinstance(value, str))


def misspelled_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """Set variables whose names are near-misses of fl_patch's (``FL_PATCH_STICT``), each with the name meant.

    Only names that contain a piece of one of ours (``FL``, ``PATCH``, ``PREFER``) are
    compared: one slip cannot remove all of them, and the rest of the environment is
    skipped at no cost.
    """
    env = os.environ if environ is None else environ
    found = []
    for name in env:
        upper = name.upper()
        if name in KNOWN_NAMES or not ("FL" in upper or "PATCH" in upper or "PREFER" in upper):
            continue
        meant = closest(name, KNOWN_NAMES)
        if meant is not None:
            found.append(
                f"fl_patch: the environment sets {name}, which fl_patch does not read: did you mean {meant}? "
                f"({name} is ignored)"
            )
    return found


_FALSE = {"0", "false", "no", "off"}
_TRUE = {"1", "true", "yes", "on"}


def _flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    """A switch: unset or empty gives ``default``; set, it is on unless it says off.

    A value that is neither on nor off (``FL_PATCH_STRICT=2``, ``=strict``) was set to ask
    for something, so it counts as on; ``unrecognised_values`` names it for a warning.
    """
    value = environ.get(name, "").strip().lower()
    if not value:
        return default
    return value not in _FALSE


def switch_value(raw: str) -> bool | None:
    """A switch variable's value read as on (True) or off (False); None for one that is neither."""
    value = raw.strip().lower()
    return True if value in _TRUE else False if value in _FALSE else None


def unrecognised_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Switch variables set to something other than on/off values, each with what it was taken as."""
    env = os.environ if environ is None else environ
    found = []
    for name in _SWITCHES:
        value = env.get(name, "").strip()
        if value and value.lower() not in _TRUE | _FALSE:
            found.append(
                f"fl_patch: {name}={value!r} is not one of {', '.join(sorted(_TRUE))} / {', '.join(sorted(_FALSE))}: "
                "taken as on"
            )
    message = compare_calls(env.get(ENV.COMPARE, ""))[1]
    if message is not None:
        found.append(message)
    return found


def _csv(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    return read_list(name, environ.get(name, ""))[0]


# ------------------------------------------------------------- the one reading of list values
# Each variable that holds a comma-separated list, with what one item may be. The variable
# and its option (``--registry`` for ``FL_PATCH_REGISTRY``) are read by these same functions:
# the CLI refuses (exit 2) exactly the items the environment reading reports, and passes
# the value on unchanged, so an option means what the variable means.


def _dotted(item: str) -> str:
    if not all(part.isidentifier() for part in item.split(".")):
        raise ValueError("not a dotted module name")
    return item


def _registry_item(item: str) -> str:
    module, colon, function = item.partition(":")
    _dotted(module.strip())
    if colon and not function.strip().isidentifier():
        raise ValueError("not MODULE or MODULE:FUNCTION (the function is called once the module is imported)")
    return f"{module.strip()}:{function.strip()}" if colon else module.strip()


def _vendor_item(item: str) -> str:
    name = item.lower()
    if not name.replace("-", "_").isidentifier():
        raise ValueError("not a vendor name such as 'default', 'cpu' or 'musa'")
    return name


def _filter_item(item: str) -> str:
    key, eq, value = item.partition("=")
    if not eq or key.strip().lower() not in FILTER_KEYS or not value.strip():
        raise ValueError(f"not KEY=VALUE with KEY one of {', '.join(FILTER_KEYS)}")
    return f"{key.strip().lower()}={value.strip()}"


def report_filters(environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """``FL_PATCH_REPORT_ONLY`` as (key, value) pairs (malformed items are left out: ``malformed_values`` says so)."""
    env = os.environ if environ is None else environ
    items = read_list(ENV.REPORT_ONLY, env.get(ENV.REPORT_ONLY, ""))[0]
    return tuple((key, value) for key, _, value in (item.partition("=") for item in items))


_ITEM_FORMS = {
    ENV.REPORT_ONLY: _filter_item,
    ENV.REGISTRY: _registry_item,
    ENV.TRIGGERS: _dotted,
    ENV.PREFER: _vendor_item,
}


def read_list(variable: str, raw: str) -> tuple[tuple[str, ...], list[str]]:
    """(the items of ``raw``, normalised; a message for each malformed item, which is left out).

    Items are separated by commas, with spaces around them and empty items ignored.
    """
    form = _ITEM_FORMS.get(variable)
    items: list[str] = []
    problems: list[str] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        try:
            items.append(form(item) if form else item)
        except ValueError as exc:
            problems.append(f"fl_patch: {variable} item {item!r}: {exc}; it is ignored")
    return tuple(items), problems


def malformed_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """A message for each malformed item of every list variable set in ``environ`` (and the rank check's two)."""
    env = os.environ if environ is None else environ
    found = [message for variable in _ITEM_FORMS for message in read_list(variable, env.get(variable, ""))[1]]
    return found + [m for m in (rank_check_mode(env)[1], rank_check_timeout(env)[1]) if m]


RANK_CHECK_MODES = ("on", "warn", "off")
RANK_CHECK_TIMEOUT_S = 300.0


def rank_check_mode(environ: Mapping[str, str]) -> tuple[str, str | None]:
    """``FL_PATCH_RANK_CHECK``: on (unset, or a switch's on word), warn, off (a switch's off word); and a message for a bad value."""
    raw = environ.get(ENV.RANK_CHECK, "").strip().lower()
    if raw in RANK_CHECK_MODES:
        return raw, None
    if not raw or raw in _TRUE:
        return "on", None
    if raw in _FALSE:
        return "off", None
    return "on", f"fl_patch: {ENV.RANK_CHECK}={raw!r} is not on, warn or off: taken as on"


def rank_check_timeout(environ: Mapping[str, str]) -> tuple[float, str | None]:
    """``FL_PATCH_RANK_CHECK_TIMEOUT`` in seconds (default 300); and a message for a value that is not a positive number."""
    raw = environ.get(ENV.RANK_CHECK_TIMEOUT, "").strip()
    if not raw:
        return RANK_CHECK_TIMEOUT_S, None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value > 0:
        return value, None
    return RANK_CHECK_TIMEOUT_S, (
        f"fl_patch: {ENV.RANK_CHECK_TIMEOUT}={raw!r} is not a positive number of seconds: {RANK_CHECK_TIMEOUT_S:g} is used"
    )


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether fl_patch is on at all (``FL_PATCH=0`` turns it off)."""
    return _flag(os.environ if environ is None else environ, ENV.ENABLED, True)


def pin_report_file(environ: MutableMapping[str, str] | None = None) -> None:
    """Make a relative ``FL_PATCH_REPORT_FILE`` (and the compare files) absolute, in the environment children inherit.

    A relative path means "here", where the job was started; each process would otherwise
    resolve it against its own working directory (torchrun's workers, a ``subprocess`` with
    ``cwd=``), and the reports would be scattered, or lost. Called once per process at
    activation (the bootstrap, the launcher, ``install()``), before any child is started.
    """
    env = os.environ if environ is None else environ
    for name in (ENV.REPORT_FILE, ENV.COMPARE_JSON, ENV.COMPARE_STEPS):
        value = env.get(name, "").strip()
        if value and not os.path.isabs(value):
            env[name] = os.path.abspath(value)


def strict_requested(environ: Mapping[str, str] | None = None) -> bool:
    """``FL_PATCH_STRICT``, read now (start-up code runs before any ``Settings`` exist)."""
    return _flag(os.environ if environ is None else environ, ENV.STRICT, False)


DEFAULT_COMPARE_CALLS = 3
"""``--compare`` with no number: the first 3 calls of each patch are compared (a few, then none pay)."""


def compare_calls(raw: str) -> tuple[int, str | None]:
    """``FL_PATCH_COMPARE``'s value as a number of calls (0: off), and a message when it is no such value.

    Empty or off (``0``, ``off``, ...): 0. A whole number N >= 1: N. On without a number (``yes``,
    ``on``, ``true``): the default. Anything else was set to ask for a compare, so it counts as
    the default, with the message saying so (the CLI refuses such a value with a usage error).
    """
    value = raw.strip().lower()
    if not value or value in _FALSE:
        return 0, None
    if value.isdigit():
        return int(value), None
    if value in _TRUE:
        return DEFAULT_COMPARE_CALLS, None
    return DEFAULT_COMPARE_CALLS, (
        f"fl_patch: {ENV.COMPARE}={raw.strip()!r} is not a number of calls (a whole number, 0 for off): "
        f"taken as {DEFAULT_COMPARE_CALLS}"
    )


class Settings:
    """One consistent reading of the environment (see ``ENV``).

    A plain class rather than a dataclass: this module is imported at interpreter
    start-up, where importing ``dataclasses`` (and ``inspect`` behind it) costs ~8 ms.
    """

    __slots__ = (
        "compare_calls",
        "compare_json",
        "compare_steps",
        "cuda_on_cpu",
        "disabled_targets",
        "enabled",
        "entry_points",
        "flagscale_tree",
        "packs",
        "prefer",
        "rank_check",
        "rank_check_timeout",
        "registry_modules",
        "report_all",
        "report_at_exit",
        "report_file",
        "report_only",
        "strict",
        "triggers",
        "watch_children",
    )

    def __init__(
        self,
        *,
        enabled: bool = True,
        strict: bool = False,
        disabled_targets: frozenset[str] = frozenset(),
        registry_modules: tuple[str, ...] = (),
        packs: tuple[str, ...] | None = None,  # None: every shipped pack
        prefer: tuple[str, ...] = (),
        report_at_exit: bool = False,
        report_file: str | None = None,
        report_all: bool = False,
        report_only: tuple[tuple[str, str], ...] = (),
        watch_children: bool = True,
        entry_points: bool = True,
        flagscale_tree: bool = True,
        cuda_on_cpu: bool = True,
        triggers: tuple[str, ...] = (),
        compare_calls: int = 0,
        compare_json: str | None = None,
        compare_steps: str | None = None,
        rank_check: str = "on",
        rank_check_timeout: float = RANK_CHECK_TIMEOUT_S,
    ) -> None:
        self.enabled = enabled
        self.strict = strict
        self.disabled_targets = disabled_targets
        self.registry_modules = registry_modules
        self.packs = packs
        self.prefer = prefer
        self.report_at_exit = report_at_exit
        self.report_file = report_file
        self.report_all = report_all  # the report lists the packs' rows too (reporting/layout.py)
        self.report_only = report_only  # the report's rows that match every (key, value), as --only
        self.watch_children = watch_children
        self.entry_points = entry_points
        self.flagscale_tree = flagscale_tree
        self.cuda_on_cpu = cuda_on_cpu
        self.triggers = triggers
        self.compare_calls = compare_calls  # 0: compare mode off, no wrapper installed
        self.compare_json = compare_json
        self.compare_steps = compare_steps
        self.rank_check = rank_check  # on / warn / off (job/rank_check.py)
        self.rank_check_timeout = rank_check_timeout

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in sorted(self.__slots__))
        return f"Settings({fields})"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        packs_raw = env.get(ENV.PACKS)
        packs: tuple[str, ...] | None
        if packs_raw is None or packs_raw.strip().lower() in ("", "all"):
            packs = None
        elif packs_raw.strip().lower() == "none":
            packs = ()
        else:
            packs = _csv(env, ENV.PACKS)
        return cls(
            enabled=_flag(env, ENV.ENABLED, True),
            strict=_flag(env, ENV.STRICT, False),
            disabled_targets=frozenset(_csv(env, ENV.DISABLE)),
            registry_modules=_csv(env, ENV.REGISTRY),
            packs=packs,
            prefer=_csv(env, ENV.PREFER),
            report_at_exit=_flag(env, ENV.REPORT, False) or bool(env.get(ENV.REPORT_FILE, "").strip()),
            report_file=env.get(ENV.REPORT_FILE, "").strip() or None,
            report_all=_flag(env, ENV.REPORT_ALL, False),
            report_only=report_filters(env),
            watch_children=_flag(env, ENV.CHILDREN, True),
            entry_points=_flag(env, ENV.ENTRY_POINTS, True),
            flagscale_tree=_flag(env, ENV.FLAGSCALE, True),
            cuda_on_cpu=_flag(env, ENV.CUDA_ON_CPU, True),
            triggers=_csv(env, ENV.TRIGGERS),
            compare_calls=_compare_calls(env),
            compare_json=env.get(ENV.COMPARE_JSON, "").strip() or None,
            compare_steps=env.get(ENV.COMPARE_STEPS, "").strip() or None,
            rank_check=rank_check_mode(env)[0],
            rank_check_timeout=rank_check_timeout(env)[0],
        )


def _compare_calls(env: Mapping[str, str]) -> int:
    calls = compare_calls(env.get(ENV.COMPARE, ""))[0]
    if not calls and env.get(ENV.COMPARE_JSON, "").strip():
        return DEFAULT_COMPARE_CALLS  # a compare file asks for a compare, as a report file asks for a report
    return calls
