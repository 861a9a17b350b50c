"""Never break the run, never hang (docs/reliability.md, "Never break the run").

Stop requests: a signal arrives wherever the main thread is; when that is inside plugin
code fl_patch runs (an impl's import, a registry module, an entry point), what the
program's own handler raises (or Python's default SIGINT handler: ``KeyboardInterrupt``)
must do what it does under plain python. Generated: signal and handler x where it lands x
how fl_patch was activated. The control: a plugin's *own* ``sys.exit()`` at import, with a
handler installed, stays one reported plugin fault.
"""

from __future__ import annotations

from dataclasses import dataclass

from hostile_case import HostileCase

GROUP = "never break the run"

_PATH = "{dir}:{src}"
# Not about the shipped packs: without them a case takes a second, not seven (they import torch).
_FAST = {"FL_PATCH_PACKS": "none"}


@dataclass(frozen=True)
class _Stop:
    """A signal the program handles (or not), and what plain python does when it arrives."""

    name: str
    setup: str  # lines at the top of main.py (installing the handler)
    signal: str  # the signal the plugin code happens to be running under
    rc: int  # plain python's exit status (a negative number: killed by that signal)
    stdout: tuple[str, ...] = ()
    wrap: bool = False  # main.py's import runs inside `try: ... except Preempted:`


_STOPS = (
    _Stop("SIGTERM handler sys.exit(143)", "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))", "SIGTERM", 143),
    _Stop(
        "SIGINT custom handler sys.exit(130)",
        "def on_int(signum, frame):\n    sys.exit(130)\nsignal.signal(signal.SIGINT, on_int)",
        "SIGINT",
        130,
    ),
    _Stop(
        "SIGUSR1 handler object raising SystemExit(7)",
        "class Handler:\n    def __call__(self, signum, frame):\n        raise SystemExit(7)\n"
        "signal.signal(signal.SIGUSR1, Handler())",
        "SIGUSR1",
        7,
    ),
    # Python's own SIGINT handler: KeyboardInterrupt, uncaught: the interpreter kills itself with SIGINT.
    _Stop("default SIGINT (KeyboardInterrupt)", "", "SIGINT", -2),
    # A handler raising the program's own exception (torchelastic's SignalException is one):
    # the program catches it at its top level to checkpoint; plain python: exit 0.
    _Stop(
        "SIGUSR1 handler raising the program's Preempted",
        "class Preempted(Exception):\n    pass\n"
        "def on_usr1(signum, frame):\n    raise Preempted(signum)\nsignal.signal(signal.SIGUSR1, on_usr1)",
        "SIGUSR1",
        0,
        stdout=("CHECKPOINTED",),
        wrap=True,
    ),
)

_SEND = "import os, signal\nos.kill(os.getpid(), signal.{signal})\nfor _ in range(10000):\n    pass\n"

_TARGET = "def f():\n    return 'upstream'\n"


def _landing(where: str, signal: str) -> tuple[dict[str, str], dict[str, str]]:
    """The files (besides main.py) and environment that put a plugin's code under the signal."""
    send = _SEND.format(signal=signal)
    if where == "impl import":
        files = {
            "impl.py": send + "def f():\n    return 'impl'\n",
            "reg.py": "from fl_patch import register\nregister('tpkg.target_mod.f', 'impl.f')\n",
        }
        return files, {"FL_PATCH_REGISTRY": "reg"}
    if where == "whole-module impl import":
        files = {
            "impl.py": send + "def f():\n    return 'impl'\n",
            "reg.py": "from fl_patch import register\nregister('tpkg.target_mod', 'impl')\n",
        }
        return files, {"FL_PATCH_REGISTRY": "reg"}
    if where == "registry module import":
        files = {"reg.py": "from fl_patch import register\nregister('tpkg.target_mod.f', 'impl.f')\n" + send}
        files["impl.py"] = "def f():\n    return 'impl'\n"
        return files, {"FL_PATCH_REGISTRY": "reg"}
    if where == "entry point":
        files = {
            "plug-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: plug\nVersion: 0.1\n",
            "plug-0.1.dist-info/entry_points.txt": "[fl_patch.registries]\nplug = plugreg\n",
            "plugreg.py": "from fl_patch import register\nregister('tpkg.target_mod.f', 'impl.f')\n" + send,
            "impl.py": "def f():\n    return 'impl'\n",
        }
        return files, {}
    raise ValueError(where)


_LANDINGS = ("impl import", "whole-module impl import", "registry module import", "entry point")

# How fl_patch is activated; each an (extra lines of main.py, command, environment) tuple.
_LAUNCHES: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "python -m fl_patch": ("", ("{python}", "-m", "fl_patch", "main.py"), {"FL_PATCH_TRIGGERS": "tpkg"}),
    "sitecustomize": (
        "",
        ("{python}", "main.py"),
        {"FL_PATCH_TRIGGERS": "tpkg", "PYTHONPATH": "{template}:{dir}:{src}"},
    ),
    "fl_patch.install()": ("import fl_patch\nfl_patch.install()\n", ("{python}", "main.py"), {}),
}


def _main(stop: _Stop, activation: str) -> str:
    body = "from tpkg import target_mod\ntarget_mod.f()\nprint('RAN-ON')\n"
    if activation:  # install() itself loads the registry module: the signal may land in it
        body = activation + body
    if stop.wrap:
        body = (
            "try:\n"
            + "".join(f"    {line}\n" for line in body.splitlines())
            + ("except Preempted:\n    print('CHECKPOINTED')\n")
        )
    return f"import signal, sys\n{stop.setup}\n{body}"


def _stop_cases() -> list[HostileCase]:
    cases = []
    for stop in _STOPS:
        for where in _LANDINGS:
            for launch, (activation, command, launch_env) in _LAUNCHES.items():
                if where == "entry point" and activation:
                    continue  # install() defers entry points to a trigger's import: same as the others
                if where == "registry module import" and not activation:
                    continue  # loaded at start-up there, before the program's first line installs a handler
                files, env = _landing(where, stop.signal)
                files = {
                    **files,
                    "main.py": _main(stop, activation),
                    "tpkg/__init__.py": "",
                    "tpkg/target_mod.py": _TARGET,
                }
                cases.append(
                    HostileCase(
                        GROUP,
                        f"{stop.name} while a plugin's {where} runs ({launch})",
                        files,
                        command=command,
                        env={"PYTHONPATH": _PATH, **_FAST, **launch_env, **env},
                        stdout=stop.stdout,
                        not_stdout=("RAN-ON",),
                        rc=stop.rc,
                        strict_same=True,  # no fl_patch problem: strict mode must stop the same way
                    )
                )
    return cases


def _own_exit_cases() -> list[HostileCase]:
    """The control: the plugin's own sys.exit() is the plugin's fault, handler or not: reported, the run goes on."""
    cases = []
    for where, file in (("impl import", "impl.py"), ("registry module import", "reg.py")):
        for handler in ("", "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))"):
            files = {
                "main.py": f"import signal, sys\n{handler}\nfrom tpkg import target_mod\ntarget_mod.f()\nprint('PROGRAM-OK')\n",
                "tpkg/__init__.py": "",
                "tpkg/target_mod.py": _TARGET,
                "impl.py": "def f():\n    return 'impl'\n",
                "reg.py": "from fl_patch import register\nregister('tpkg.target_mod.f', 'impl.f')\n",
            }
            files[file] = "import sys\nsys.exit(3)\n" + files[file]
            cases.append(
                HostileCase(
                    GROUP,
                    f"a plugin's own sys.exit(3) in its {where}" + (" (SIGTERM handler installed)" if handler else ""),
                    files,
                    env={"PYTHONPATH": _PATH, **_FAST, "FL_PATCH_REGISTRY": "reg", "FL_PATCH_TRIGGERS": "tpkg"},
                    warns=("SystemExit: 3",),
                    strict_stops=True,
                )
            )
    return cases


CASES = [*_stop_cases(), *_own_exit_cases()]


# Ctrl-C then retry: the program catches a KeyboardInterrupt that landed in plugin code
# (the first time only: a flag on builtins) and imports again. The retry must find
# fl_patch as if the interrupted attempt had never started: the target patched, no stale
# state (a cached platform guess, a registry half loaded, deferred sources dropped).
_INTERRUPT_ONCE = (
    "import builtins\n"
    "if not getattr(builtins, '_fl_interrupted', False):\n"
    "    builtins._fl_interrupted = True\n"
    "    raise KeyboardInterrupt\n"
)

_RETRY_MAIN = """\
import sys
{activation}
try:
    from tpkg import target_mod
except KeyboardInterrupt:
    print('INTERRUPTED')
    sys.modules.pop('tpkg.target_mod', None)
    {again}
    from tpkg import target_mod
print('RESULT', target_mod.f())
"""


def _retry_cases() -> list[HostileCase]:
    cases = []
    for where in _LANDINGS:
        for torch in (False, True):
            if torch and where not in ("impl import", "entry point"):
                continue  # torch's import is seconds: two landings show it
            files, env = _landing(where, "SIGINT")
            interrupt = ("import torch\n" if torch else "") + _INTERRUPT_ONCE
            activation, again = "", ""
            if where == "registry module import":
                activation, again = (
                    "import fl_patch\ntry:\n    fl_patch.install()\nexcept KeyboardInterrupt:\n    print('INTERRUPTED')\n",
                    "pass",
                )
                activation += "fl_patch.install()"
            for name, text in files.items():
                if name.endswith(".py") and "os.kill" in text:
                    files[name] = text.replace(_SEND.format(signal="SIGINT"), interrupt)
            stdout = ("INTERRUPTED", "RESULT impl")
            cases.append(
                HostileCase(
                    GROUP,
                    f"Ctrl-C in a plugin's {where}{' importing torch' if torch else ''}, caught, then imported again",
                    {
                        **files,
                        "main.py": _RETRY_MAIN.format(activation=activation, again=again or "pass"),
                        "tpkg/__init__.py": "",
                        "tpkg/target_mod.py": _TARGET,
                    },
                    env={"PYTHONPATH": _PATH, **_FAST, "FL_PATCH_TRIGGERS": "tpkg", **env},
                    stdout=stdout,
                    not_stderr=("FlPatchWarning",),
                    strict_same=True,
                )
            )
    return cases


CASES += _retry_cases()


# The report file accepts what a shell's `>>` accepts and never keeps a finished program
# from exiting. Each case's program exits 7 (its own status must come back) after a patched
# call; a shell around it makes the destination (a FIFO, a descriptor, a link) and checks
# what arrived. Generated: destination x how the path is given (--report-file, the variable).
_REPORT_FILES = {
    "main.py": "import sys\nfrom tpkg import target_mod\nprint('PROGRAM-OK', target_mod.f())\nsys.stdout.flush()\nsys.exit(7)\n",
    "tpkg/__init__.py": "",
    "tpkg/target_mod.py": _TARGET,
    "impl.py": "def f():\n    return 'impl'\n",
    "reg.py": "from fl_patch import register\nregister('tpkg.target_mod.f', 'impl.f')\n",
    # What arrived at the destination: one JSON line naming the target, the secret redacted.
    "got.py": (
        "import json, sys\n"
        "text = open(sys.argv[1]).read()\n"
        "entries = [json.loads(line) for line in text.splitlines() if line.startswith('{')]\n"
        "(entry,) = [e for e in entries if any(r['status'] == 'applied' for r in e['records'])]\n"
        "assert entry['records'][0]['target'] == 'tpkg.target_mod.f', entry\n"
        "assert 'hunter2' not in text, text\n"
        "print('REPORT-ARRIVED')\n"
    ),
}

# destination: (shell lines before the run, the path, redirections of the run, shell lines after, stdout, warns)
_DESTINATIONS: dict[str, tuple[str, str, str, str, tuple[str, ...], tuple[str, ...]]] = {
    "a FIFO no process reads": ("mkfifo r.fifo", "r.fifo", "", "", (), ("FIFO no process is reading",)),
    "a FIFO a process reads": (
        "mkfifo r.fifo; cat r.fifo > got.txt & reader=$!",
        "r.fifo",
        "",
        "wait $reader; {python} got.py got.txt",
        ("REPORT-ARRIVED",),
        (),
    ),
    "/dev/stderr (redirected to a file)": (
        "",
        "/dev/stderr",
        "2> got.txt",
        "{python} got.py got.txt",
        ("REPORT-ARRIVED",),
        (),
    ),
    "/dev/fd/3": ("", "/dev/fd/3", "3> got.txt", "{python} got.py got.txt", ("REPORT-ARRIVED",), ()),
    "/dev/null": ("", "/dev/null", "", "", (), ()),
    "a link to /dev/null": ("ln -s /dev/null r.link", "r.link", "", "", (), ()),
    "a link to a FIFO a process reads": (
        "mkfifo r.fifo; ln -s r.fifo r.link; cat r.fifo > got.txt & reader=$!",
        "r.link",
        "",
        "wait $reader; {python} got.py got.txt",
        ("REPORT-ARRIVED",),
        (),
    ),
    # The security rule stays: a link to a regular file is not written through.
    "a link to a regular file": (
        "echo precious > victim.txt; ln -s victim.txt r.link",
        "r.link",
        "",
        "grep -qx precious victim.txt && test $(wc -l < victim.txt) -eq 1 && echo VICTIM-UNTOUCHED",
        ("VICTIM-UNTOUCHED",),
        ("symbolic link",),
    ),
    "a dangling link": (
        "ln -s nowhere.txt r.link",
        "r.link",
        "",
        "test ! -e nowhere.txt && echo NOTHING-CREATED",
        ("NOTHING-CREATED",),
        ("symbolic link",),
    ),
    # A relative path names the directory the job started in, also for a child started elsewhere.
    "a relative path, and a child in another directory": (
        'mkdir -p sub; printf \'import subprocess, sys\\nsys.exit(subprocess.run([sys.executable, "../main.py"], cwd="sub").returncode)\\n\' > parent.py',
        "rel.jsonl",
        "",
        "test ! -e sub/rel.jsonl && {python} got.py rel.jsonl",
        ("REPORT-ARRIVED",),
        (),
    ),
}


def _report_cases() -> list[HostileCase]:
    cases = []
    for destination, (before, path, redirect, after, stdout, warns) in _DESTINATIONS.items():
        for given in ("--report-file", "FL_PATCH_REPORT_FILE"):
            env = {"PYTHONPATH": _PATH, **_FAST, "FL_PATCH_REGISTRY": "reg", "FL_PATCH_TRIGGERS": "tpkg"}
            program = "main.py"
            if destination.startswith("a relative path"):
                if given == "--report-file":
                    continue  # the launcher makes it absolute itself
                program = "parent.py"
            if given == "--report-file":
                run = f"{{python}} -m fl_patch --report-file {path} {program} --password hunter2"
            else:
                env["FL_PATCH_REPORT_FILE"] = path
                run = f"{{python}} -m fl_patch {program} --password hunter2"
            script = "\n".join(
                filter(None, [before, f"{run} {redirect}; status=$?", after, 'echo "STATUS $status"', "exit $status"])
            )
            cases.append(
                HostileCase(
                    GROUP,
                    f"report file: {destination} ({given})",
                    _REPORT_FILES,
                    command=("sh", "-c", script),
                    env=env,
                    stdout=("PROGRAM-OK impl", "STATUS 7", *stdout),
                    rc=7,
                    warns=warns,
                    not_stderr=() if warns else ("could not write the exit report",),
                    timeout=30.0,
                )
            )
    return cases


CASES += _report_cases()


# Strict mode's exit: a strict error the program swallowed (`except Exception` around an
# import, as megatron does) stops the run at exit with status 1, but only after the
# program's own atexit handlers (registered before and after fl_patch installed) and the
# exit report ran. Generated: activation x report on/off. The registration comes from an
# entry point, so fl_patch installs at the trigger's import, after the first handler.
_STRICT_EXIT_FILES = {
    "plug-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: plug\nVersion: 0.1\n",
    "plug-0.1.dist-info/entry_points.txt": "[fl_patch.registries]\nplug = plugreg\n",
    "plugreg.py": "from fl_patch import register\nregister('tpkg.target_mod.f', 'impl.f')\n",
    "impl.py": "import vendor_sdk_missing\n",
    "tpkg/__init__.py": "",
    "tpkg/target_mod.py": _TARGET,
}

_STRICT_EXIT_MAIN = """\
import atexit
{activation}atexit.register(lambda: print('ATEXIT-EARLY', flush=True))
try:
    from tpkg import target_mod
except Exception:
    pass  # upstream code's `except Exception` around an optional import
atexit.register(lambda: print('ATEXIT-LATE', flush=True))
print('PROGRAM-OK')
"""


def _strict_exit_cases() -> list[HostileCase]:
    cases = []
    launches = {
        "python -m fl_patch": ("", "{python} -m fl_patch main.py", {}),
        "sitecustomize": ("", "{python} main.py", {"PYTHONPATH": "{template}:{dir}:{src}"}),
        "fl_patch.install() first": ("import fl_patch\nfl_patch.install()\n", "{python} main.py", {}),
    }
    for launch, (activation, run, launch_env) in launches.items():
        for report in (False, True):
            script = run + (
                "; status=$?; grep -q tpkg.target_mod.f rep.jsonl && echo REPORT-WRITTEN; exit $status"
                if report
                else ""
            )
            env = {"PYTHONPATH": _PATH, **_FAST, "FL_PATCH_TRIGGERS": "tpkg", **launch_env}
            if report:
                env["FL_PATCH_REPORT_FILE"] = "rep.jsonl"
            ran = ("ATEXIT-EARLY", "ATEXIT-LATE", *(("REPORT-WRITTEN",) if report else ()))
            cases.append(
                HostileCase(
                    GROUP,
                    f"strict exit after a swallowed error runs the atexit handlers{' and the report' if report else ''} ({launch})",
                    {**_STRICT_EXIT_FILES, "main.py": _STRICT_EXIT_MAIN.format(activation=activation)},
                    command=("sh", "-c", script),
                    env=env,
                    stdout=("PROGRAM-OK", *ran),
                    warns=("vendor_sdk_missing",),
                    strict_stops=True,
                    strict_rc=1,
                    strict_stdout=ran,
                )
            )
    return cases


# FL_PATCH_STRICT=2 (on, like any value that is not off) where fl_patch cannot be imported:
# the bootstrap stops as it does for FL_PATCH_STRICT=1. A broken fl_patch (its import raises)
# stops start-up; a missing one stops at the first megatron import, one message, status 1.
def _unimportable_cases() -> list[HostileCase]:
    cases = []
    broken = {
        "fl_patch broken": {"fake/fl_patch/__init__.py": "raise RuntimeError('half-installed fl_patch')\n"},
        # What an interpreter without fl_patch's dependencies sees (shadowing the installed copy).
        "fl_patch missing": {"fake/fl_patch/__init__.py": "raise ImportError(\"No module named 'wrapt'\")\n"},
    }
    for kind, extra in broken.items():
        for value in ("1", "2", "strict"):
            files = {
                **extra,
                # `import megatron` only: megatron.core needs triton here, with or without fl_patch.
                "main.py": ("import megatron\n" if "missing" in kind else "") + "print('PROGRAM-OK')\n",
            }
            cases.append(
                HostileCase(
                    GROUP,
                    f"FL_PATCH_STRICT={value} and {kind}",
                    files,
                    command=("{python}", "main.py"),
                    # Only the template and the fake on the path: fl_patch's own src is not.
                    env={"PYTHONPATH": "{template}:{dir}/fake", "FL_PATCH_STRICT": value},
                    stdout=(),
                    not_stdout=("PROGRAM-OK",),
                    rc=1,
                    warns=("fl_patch",),
                    strict_stops=False,
                )
            )
    return cases


CASES += _strict_exit_cases()
CASES += _unimportable_cases()
