"""Every command-line option and environment variable of fl_patch, in one table.

``--help`` prints it, the CLI parses with it (``fl_patch.cli``), the launcher turns the
options into the variables children inherit, and a test checks that every variable
``Settings`` reads (``ENV``) has a row. Adding a setting is one row here plus its
reading in ``fl_patch._settings``; the help text, the parser and the docs' table
cannot drift apart.

Kinds of rows:

- ``set``: ``--packs cpu`` sets the variable to the value;
- ``append``: ``--registry a --registry b`` adds to what the environment already has;
- ``switch``: ``--strict`` sets the variable to ``value`` (``1`` or ``0``);
- ``optional``: ``--compare`` sets the variable to ``value``, ``--compare 5`` (or ``--compare=5``) to
  the number given; a following word is taken as the number only when it starts like one;
- ``env``: a variable with no option (``FL_PATCH=0``; ``FL_PATCH_BOOTSTRAP``, set by
  the launcher itself);
- ``local``: an option of this command only, no variable (``--in-process``, ``--json``,
  the ``--list``/``--check`` filters);
- ``command``: what to do instead of running a program (``--list``, ``--check``, ...).
"""

from __future__ import annotations

from fl_patch.config.settings import DEFAULT_COMPARE_CALLS, ENV

__all__ = ["COMMANDS", "OPTIONS", "Option", "variables"]


class Option:
    """One row: an option, the variable it sets, and the help text of both."""

    __slots__ = ("flags", "help", "kind", "metavar", "value", "variable")

    def __init__(
        self,
        flags: tuple[str, ...],
        kind: str,
        help: str,
        *,
        variable: str | None = None,
        metavar: str | None = None,
        value: str | None = None,
    ) -> None:
        self.flags = flags  # () for a variable with no option
        self.kind = kind
        self.help = help
        self.variable = variable
        self.metavar = metavar
        self.value = value  # what a switch sets its variable to

    @property
    def takes_value(self) -> bool:
        """Whether the option always takes a value (an ``optional`` one may stand alone)."""
        return self.metavar is not None and self.kind != "optional"

    @property
    def setting(self) -> str:
        """How the variable is written in the help: ``FL_PATCH_STRICT=1``, ``MG_FL_PREFER``."""
        if self.variable is None:
            return ""
        if self.kind == "optional":
            return f"{self.variable}={self.metavar}"
        return f"{self.variable}={self.value}" if self.value is not None else self.variable


OPTIONS: tuple[Option, ...] = (
    Option(
        ("--vendor",),
        "set",
        "vendor priority, e.g. musa or flaggems,cuda (FlagScale's variable)",
        variable=ENV.PREFER,
        metavar="V[,V]",
    ),
    Option(
        ("--registry",),
        "append",
        "registry module to import (repeatable)",
        variable=ENV.REGISTRY,
        metavar="MOD[,MOD]",
    ),
    Option(
        ("--packs",),
        "set",
        "shipped packs to enable: names, all (the default) or none",
        variable=ENV.PACKS,
        metavar="P[,P]",
    ),
    Option(
        ("--disable",),
        "append",
        "targets or method keys not to patch (repeatable)",
        variable=ENV.DISABLE,
        metavar="T[,T]",
    ),
    Option(("--strict",), "switch", "any patch problem is an error that stops the run", variable=ENV.STRICT, value="1"),
    Option(("--traceback",), "switch", "show a strict error with its traceback", variable=ENV.TRACEBACK, value="1"),
    Option(
        ("--report",),
        "switch",
        "at exit, per process: applied, calls through each patch, never triggered",
        variable=ENV.REPORT,
        value="1",
    ),
    Option(
        ("--report-file",),
        "set",
        "append that report as JSON lines to PATH (implies --report)",
        variable=ENV.REPORT_FILE,
        metavar="PATH",
    ),
    Option(
        (),
        "env",
        "set by --report --all: the exit report lists the shipped packs' rows too, not one line per pack",
        variable=ENV.REPORT_ALL,
        value="1",
    ),
    Option(
        (),
        "env",
        "set by --report --only KEY=VALUE: the exit report's rows that match (comma-separated KEY=VALUE)",
        variable=ENV.REPORT_ONLY,
    ),
    Option(
        ("--compare",),
        "optional",
        f"the first N calls (default {DEFAULT_COMPARE_CALLS}) of each patch also run upstream's original on copies of "
        "their inputs; outputs and gradients compared, a table at exit (docs/compare.md)",
        variable=ENV.COMPARE,
        metavar="N",
        value=str(DEFAULT_COMPARE_CALLS),
    ),
    Option(
        ("--compare-json",),
        "set",
        "append the compare records (one JSON line per process) to PATH (implies --compare)",
        variable=ENV.COMPARE_JSON,
        metavar="PATH",
    ),
    Option(
        ("--triggers",),
        "append",
        "packages whose first import activates fl_patch, besides megatron",
        variable=ENV.TRIGGERS,
        metavar="PKG[,PKG]",
    ),
    Option(
        ("--no-entry-points",),
        "switch",
        "ignore installed fl_patch.registries entry points",
        variable=ENV.ENTRY_POINTS,
        value="0",
    ),
    Option(
        ("--no-flagscale",),
        "switch",
        "ignore a FlagScale plugin tree (FL_PATCH_FLAGSCALE=1: also one next to the script or in the cwd)",
        variable=ENV.FLAGSCALE,
        value="0",
    ),
    Option(
        ("--no-cuda-on-cpu",),
        "switch",
        "no CUDA-on-CPU transfer on a machine without a GPU",
        variable=ENV.CUDA_ON_CPU,
        value="0",
    ),
    Option(
        ("--no-child-warnings",),
        "switch",
        "do not warn about child processes fl_patch cannot reach",
        variable=ENV.CHILDREN,
        value="0",
    ),
    Option(
        ("--rank-check",),
        "set",
        "ranks whose patches differ stop the job at its process group's creation (on), are a warning (warn), or are not compared (off)",
        variable=ENV.RANK_CHECK,
        metavar="on|warn|off",
    ),
    Option(("--in-process",), "local", "run the program in this interpreter (runpy), not a fresh one"),
    Option((), "env", "fl_patch does nothing at all (also 0, false, no, off)", variable=ENV.ENABLED, value="0"),
    Option((), "env", "set by the launcher: the bootstrap directory it put on PYTHONPATH", variable=ENV.BOOTSTRAP),
    Option((), "env", "set by the launcher: the pid of the program it runs", variable=ENV.LAUNCHED),
    Option(
        (),
        "env",
        "set by fl_patch: the packs' one-line notices said in this job, which its other processes do not repeat"
        " (* : none; --list, --check and fl_patch.testing set it)",
        variable=ENV.SAID,
    ),
    Option(
        (),
        "env",
        "set by the launcher: the directory it was started in, where a registry module that is not on sys.path "
        "is looked for (every process of the job looks in the same place)",
        variable=ENV.START_DIR,
    ),
    Option((), "env", "set while registries load: children started then do not load them", variable=ENV.LOADING),
    Option(
        (),
        "env",
        "set by fl-patch compare: each process appends its training steps' loss and grad norm to PATH",
        variable=ENV.COMPARE_STEPS,
    ),
    Option(
        (),
        "env",
        "seconds the rank check waits for every rank of a group (default 300)",
        variable=ENV.RANK_CHECK_TIMEOUT,
    ),
    Option(
        (),
        "env",
        "set by fl_patch.job.ray.runtime_env: the Ray worker setup hook to run after fl_patch's",
        variable=ENV.RAY_NEXT_HOOK,
    ),
)

# What to do instead of running a program, and the options that shape their output.
COMMANDS: tuple[Option, ...] = (
    Option(("--list",), "command", "every registration and the vendor chosen here (imports no megatron module)"),
    Option(("--check",), "command", "does every impl fit the installed Megatron? exit status 1 if not"),
    Option(("--json",), "local", "--list / --check output as JSON (every row: the packs' too)"),
    Option(
        ("--all",),
        "local",
        "--list / --check / --report / --compare: the shipped packs' rows too (by default: your registrations,"
        " and one line per pack)",
    ),
    Option(
        ("--only",),
        "local",
        "--list / --check / --report / --compare: keep vendor=, source=, status=, target= or pack= matches"
        " (repeatable; * globs; pack=none: yours)",
        metavar="KEY=VALUE",
    ),
    Option(("--why",), "local", "--list: each registration's PatchDoc (why, how, upstream, when to remove)"),
    Option(
        ("--against",),
        "local",
        "--check: the same verdicts, statically, against a megatron-core that is not installed: a version"
        " (wheel fetched into a cache), a wheel or a source tree (repeatable: two also print the diff)",
        metavar="V|WHEEL|TREE",
    ),
    Option(("--offline",), "local", "--check --against VERSION: use the wheel cache only"),
    Option(("--print-pythonpath",), "command", "the directory to put on PYTHONPATH to activate fl_patch without it"),
    Option(("--version",), "command", "fl_patch, Python, torch and megatron-core versions"),
    Option(("-h", "--help"), "command", "this help"),
)


def variables() -> dict[str, Option]:
    """Every environment variable with its row."""
    return {row.variable: row for row in OPTIONS if row.variable is not None}
