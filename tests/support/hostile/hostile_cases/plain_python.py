"""As plain python would (docs/reliability.md, "As plain python would").

Every activation way (the launcher's re-exec, ``--in-process``, options, the console
script, the template on ``PYTHONPATH``, ``--print-pythonpath``) must show the program what
plain ``python program`` shows it. Each case is a *driver* (run by plain python) that runs
one probe program twice, plainly and under one activation way, with the same environment
otherwise, and compares what the probe observed (its stdout and stderr, object addresses
and the bootstrap's own ``PYTHONPATH`` entry aside) and the exit status. The driver prints
``PROGRAM-OK`` when they agree and the difference when not. Generated: activation way x
program (script, ``-m``, ``-c``, a directory) x how it ends (returns, ``sys.exit``, an
exception, ``KeyboardInterrupt``, a real SIGINT) x the user's ``sitecustomize`` layout.
"""

from __future__ import annotations

import json

from hostile_case import HostileCase

GROUP = "as plain python"

# What the probe observes, printed in an order both runs share. It never prints the
# environment (the launcher's options are variables there) nor sys.modules (fl_patch is in it).
_PROBE = r"""
import atexit, builtins, os, pickle, sys

def _is_bootstrap(entry):
    try:
        with open(os.path.join(entry or ".", "sitecustomize.py"), "rb") as handle:
            return handle.read(21) == b"# fl_patch bootstrap."
    except OSError:
        return False

def show(*parts):
    # Only the program itself prints: a spawn child re-runs this file as __mp_main__, and its
    # lines would interleave with the parent's in an order neither python nor fl_patch decides.
    if __name__ == "__main__":
        print(*parts, flush=True)

main = sys.modules["__main__"]
g = globals()
show("main-is-globals", main.__dict__ is g, "name", __name__)
show("globals", sorted(k for k in g if k.startswith("__")))
show("file", g.get("__file__", "<unset>"), "cached", g.get("__cached__", "<unset>"))
loader = g.get("__loader__")
show("loader", type(loader).__name__ if not isinstance(loader, type) else loader.__name__, getattr(loader, "path", None))
spec = g.get("__spec__")
show("spec", None if spec is None else (spec.name, spec.origin), "package", repr(g.get("__package__")))
show("builtins-is-module", g.get("__builtins__") is builtins, "doc", repr(g.get("__doc__")))
show("argv", sys.argv)
show("orig_argv", sys.orig_argv)
show("executable", sys.executable)
show("path0", sys.path[0] if sys.path else None)
show("path", [p for p in sys.path if not _is_bootstrap(p)])
show("flags", tuple(sys.flags), "warnoptions", sys.warnoptions, "dont_write_bytecode", sys.dont_write_bytecode)
custom = sys.modules.get("sitecustomize")
show("sitecustomize", getattr(custom, "__file__", None) if custom is not None and not _is_bootstrap(os.path.dirname(custom.__file__ or "")) else None)
log = os.environ.get("PP_CUSTOMIZE_LOG")
if log:
    with open(log) as handle:
        runs = handle.read().split()
    show("customize-runs", len(runs), "in-this-process", runs.count(str(os.getpid())))

def defined_here():
    return "defined in the script"

show("pickle", pickle.loads(pickle.dumps(defined_here)) is defined_here)

def at_exit():
    now = sys.modules["__main__"]
    show("atexit-main-is-program", now is main, "has-file", hasattr(now, "__file__"),
         "pickle", pickle.loads(pickle.dumps(defined_here)) is defined_here)

if __name__ == "__main__":
    atexit.register(at_exit)

def spawned(queue):
    queue.put(("child", __name__, sys.modules["__main__"].__name__))

END = os.environ.get("PP_END", "return")
if END == "spawn" and __name__ == "__main__":
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=spawned, args=(queue,))
    child.start()
    show("spawn", queue.get(timeout=60))
    child.join(60)
    show("spawn-exit", child.exitcode)

def inner():
    if END == "raise":
        raise ValueError("the program's own error")
    if END == "chained":
        try:
            {}["missing"]
        except KeyError as exc:
            raise RuntimeError("while handling") from exc
    if END == "interrupt":
        raise KeyboardInterrupt
    if END == "sigint":
        import signal
        os.kill(os.getpid(), signal.SIGINT)
        import time
        time.sleep(5)
    if END == "sigint-default":
        import signal
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    if END == "exit":
        sys.exit(3)
    if END == "exit-message":
        sys.exit("the program says goodbye")
    if END == "excepthook":
        def hook(kind, value, tb):
            import traceback
            sys.stderr.write("USER HOOK " + "".join(traceback.format_exception(kind, value, tb)))
        sys.excepthook = hook
        raise LookupError("through the user's hook")

if __name__ == "__main__":
    inner()
    show("returned")
"""

# Runs the probe plainly and under one activation way, compares, says PROGRAM-OK or the difference.
_DRIVER = r"""
import difflib, json, os, re, subprocess, sys

here = os.getcwd()

def expand(text):
    for key in ("src", "template", "dir"):
        text = text.replace("{%s}" % key, os.environ["PP_" + key.upper()])
    return text

spec = json.load(open("case.json"))
spec["env"] = {k: expand(v) for k, v in spec["env"].items()}
spec["way_env"] = {k: expand(v) for k, v in spec["way_env"].items()}
python = sys.executable
base = dict(os.environ)
base.update(spec["env"])
for key in list(base):
    if key.startswith("PP_CUSTOMIZE_LOG") or key in ("PP_SRC", "PP_TEMPLATE", "PP_DIR"):
        del base[key]

def run(words, env, log):
    env = dict(env)
    if spec["customize"]:
        env["PP_CUSTOMIZE_LOG"] = os.path.join(here, log)
        open(env["PP_CUSTOMIZE_LOG"], "w").close()
    proc = subprocess.run(words, env=env, cwd=os.path.join(here, spec["cwd"]), capture_output=True, text=True, timeout=90)
    text = "exit %s\n--- stdout\n%s--- stderr\n%s" % (proc.returncode, proc.stdout, proc.stderr)
    text = re.sub(r"0x[0-9a-f]+", "0x?", text)
    return text.replace(log, "<log>")

plain = run([python, *spec["interpreter"], *spec["program"]], base, "plain.log")
way_env = dict(base)
way_env.update(spec["way_env"])
if spec["print_pythonpath"]:
    out = subprocess.run([python, "-m", "fl_patch", "--print-pythonpath"], env=base, capture_output=True, text=True, check=True)
    way_env["PYTHONPATH"] = out.stdout.strip() + os.pathsep + way_env["PYTHONPATH"]
words = [python, *spec["interpreter"], *spec["way"], *spec["program"]]
patched = run(words, way_env, "way.log")
if plain == patched:
    print("PROGRAM-OK")
    print(plain)
else:
    print("DIFFERS from plain python under", words)
    sys.stdout.writelines(difflib.unified_diff(plain.splitlines(True), patched.splitlines(True), "plain", "fl_patch"))
"""

_CUSTOMIZE = (
    "import os\nlog = os.environ.get('PP_CUSTOMIZE_LOG')\nif log:\n    open(log, 'a').write('%d\\n' % os.getpid())\n"
)

# site reports it as "Error in sitecustomize; ..." and the program runs on.
_BROKEN = "raise RuntimeError('the user site is broken')\n"

_CONSOLE_SCRIPT = (
    "import sys\nfrom fl_patch.cli import main\nif __name__ == '__main__':\n"
    "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n    sys.exit(main())\n"
)

# (name, words before the program, extra environment, use --print-pythonpath)
_WAYS: tuple[tuple[str, tuple[str, ...], dict[str, str], bool], ...] = (
    ("python -m fl_patch", ("-m", "fl_patch"), {}, False),
    ("--in-process", ("-m", "fl_patch", "--in-process"), {}, False),
    ("--vendor cpu", ("-m", "fl_patch", "--vendor", "cpu"), {}, False),
    ("--vendor cpu --in-process", ("-m", "fl_patch", "--vendor", "cpu", "--in-process"), {}, False),
    (
        "--in-process --vendor=cpu --packs none",
        ("-m", "fl_patch", "--in-process", "--vendor=cpu", "--packs", "none"),
        {},
        False,
    ),
    ("--no-child-warnings --disable x.y", ("-m", "fl_patch", "--no-child-warnings", "--disable", "x.y"), {}, False),
    ("--strict --packs none", ("-m", "fl_patch", "--strict", "--packs", "none"), {}, False),
    ("console script fl-patch", ("fl-patch",), {}, False),
    ("console script fl-patch --in-process", ("fl-patch", "--in-process"), {}, False),
    ("template on PYTHONPATH", (), {"PYTHONPATH": "{template}:{src}"}, False),
    ("--print-pythonpath", (), {}, True),
    # The template on PYTHONPATH *and* the launcher: the bootstrap runs in the launcher too.
    ("template + python -m fl_patch", ("-m", "fl_patch"), {"PYTHONPATH": "{template}:{src}"}, False),
    (
        "template + --vendor cpu --in-process",
        ("-m", "fl_patch", "--vendor", "cpu", "--in-process"),
        {"PYTHONPATH": "{template}:{src}"},
        False,
    ),
    ("template + console script fl-patch", ("fl-patch",), {"PYTHONPATH": "{template}:{src}"}, False),
    ("--print-pythonpath + python -m fl_patch --in-process", ("-m", "fl_patch", "--in-process"), {}, True),
)

# (name, program words, directory the program runs in)
_PROGRAMS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("script", ("probe.py", "an-arg", "--strict"), "."),
    ("script in a subdirectory", ("sub/probe.py", "x"), "."),
    ("-m module", ("-m", "probe", "an-arg"), "."),
    ("-c code", ("-c", "exec(open('probe.py').read())", "an-arg"), "."),
    ("a directory with __main__", ("app", "x"), "."),
)

_ENDS = ("return", "exit", "exit-message", "raise", "chained", "interrupt", "sigint", "sigint-default", "excepthook")


def _case(
    way: tuple[str, tuple[str, ...], dict[str, str], bool],
    program: tuple[str, tuple[str, ...], str],
    end: str,
    *,
    interpreter: tuple[str, ...] = (),
    customize: str | None = None,
) -> HostileCase:
    way_name, way_words, way_env, print_pythonpath = way
    program_name, program_words, cwd = program
    pythonpath = "{src}"
    if customize in ("on PYTHONPATH", "that raises"):
        pythonpath = "{dir}/usersite:{src}"
    elif customize == "after src":
        pythonpath = "{src}:{dir}/usersite"
    spec = {
        "way": list(way_words),
        "way_env": {k: v.replace("{src}", pythonpath) for k, v in way_env.items()},
        "print_pythonpath": print_pythonpath,
        "program": list(program_words),
        "cwd": cwd,
        "interpreter": list(interpreter),
        "env": {"PP_END": end, "PYTHONPATH": pythonpath},
        "customize": customize is not None,
    }
    files = {
        "driver.py": _DRIVER,
        "probe.py": _PROBE,
        "sub/probe.py": _PROBE,
        "app/__main__.py": _PROBE,
        "fl-patch": _CONSOLE_SCRIPT,
        "case.json": json.dumps(spec),
    }
    if customize is not None:
        files["usersite/sitecustomize.py"] = _CUSTOMIZE + (_BROKEN if customize == "that raises" else "")
    name = f"{way_name} | {program_name} | {end}"
    if interpreter:
        name += f" | python {' '.join(interpreter)}"
    if customize:
        name += f" | user sitecustomize {customize}"
    # {template}/{src}/{dir} are expanded by the runner in `env` only: case.json names them
    # through the environment the driver passes on.
    return HostileCase(
        GROUP,
        name,
        files,
        command=("{python}", "driver.py"),
        env={"PP_SRC": "{src}", "PP_TEMPLATE": "{template}", "PP_DIR": "{dir}"},
        stdout=("PROGRAM-OK",),
        strict_same=end == "return",  # nothing of fl_patch's goes wrong here: strict must change nothing
        timeout=120,
    )


def _cases() -> list[HostileCase]:
    cases = []
    for way in _WAYS:
        for program in _PROGRAMS:
            for end in ("return", "raise", "interrupt"):
                cases.append(_case(way, program, end))
        for end in _ENDS:
            if end not in ("return", "raise", "interrupt"):
                cases.append(_case(way, _PROGRAMS[0], end))
        for layout in ("on PYTHONPATH", "after src", "that raises"):
            cases.append(_case(way, _PROGRAMS[0], "return", customize=layout))
        cases.append(
            _case(way, _PROGRAMS[0], "raise", interpreter=("-u", "-B", "-W", "error::DeprecationWarning", "-X", "utf8"))
        )
        cases.append(_case(way, _PROGRAMS[2], "return", interpreter=("-O",)))
    cases.append(_case(_WAYS[0], _PROGRAMS[0], "spawn"))
    cases.append(_case(_WAYS[1], _PROGRAMS[0], "spawn"))
    return cases


CASES = _cases()


# ------------------------------------------------------------------- an argv close to ARG_MAX
# The driver finds the longest argument list with which the launcher's own command still
# starts (the kernel's ARG_MAX counts argv and the environment; measured by exec'ing /bin/true
# through a link whose path is as long as the interpreter's), less `margin` bytes, and runs it.
# Plain python would have run that program; the re-exec adds the bootstrap directory to the
# environment and may not fit: the program must run all the same, and nothing be said.
_BIG_DRIVER = r"""
import errno, json, os, subprocess, sys

spec = json.load(open("case.json"))
python = sys.executable
here = os.getcwd()
env = dict(os.environ)
env["PYTHONPATH"] = env["PP_SRC"]
for key in ("PP_SRC", "PP_TEMPLATE", "PP_DIR"):
    env.pop(key, None)
true = "/bin/true"
link = os.path.join(here, "t" * max(1, len(python) - len(here) - 1))
if len(link) == len(python):
    os.symlink("/bin/true", link)
    true = link
head = [python, *spec["way"], "prog.py"]
CHUNK = 100_000  # under the kernel's limit for one string (128 KiB)

def words(size):
    return head + ["x" * CHUNK] * (size // CHUNK) + (["y" * (size % CHUNK)] if size % CHUNK else [])

def fits(size):
    try:
        subprocess.run(words(size), executable=true, env=env, check=True)
        return True
    except OSError as exc:
        if exc.errno != errno.E2BIG:
            raise
        return False

low, high = 0, os.sysconf("SC_ARG_MAX")
while low < high:  # the largest size that fits
    middle = (low + high + 1) // 2
    if fits(middle):
        low = middle
    else:
        high = middle - 1
size = max(0, low - spec["margin"])
command = words(size)
proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=90)
expected = "ARGS %d %d" % (len(command) - len(head), size)
if proc.returncode == 0 and expected in proc.stdout and proc.stderr == "":
    print("PROGRAM-OK", expected, "within", os.sysconf("SC_ARG_MAX") - size, "bytes of ARG_MAX")
else:
    print("FAILED: exit", proc.returncode, "expected", expected, "stdout", proc.stdout[-500:], "stderr", proc.stderr[-2000:])
"""

_BIG_PROGRAM = "import sys\nprint('ARGS %d %d' % (len(sys.argv) - 1, sum(map(len, sys.argv[1:]))))\n"


def _big_case(way_name: str, way: tuple[str, ...], margin: int) -> HostileCase:
    return HostileCase(
        GROUP,
        f"argv within {margin} bytes of what fits | {way_name}",
        {
            "driver.py": _BIG_DRIVER,
            "prog.py": _BIG_PROGRAM,
            "fl-patch": _CONSOLE_SCRIPT,
            "case.json": json.dumps({"way": list(way), "margin": margin}),
        },
        command=("{python}", "driver.py"),
        env={"PP_SRC": "{src}", "PP_TEMPLATE": "{template}", "PP_DIR": "{dir}"},
        strict_same=True,
    )


CASES += [
    _big_case(name, way, margin)
    for name, way in (
        ("python -m fl_patch", ("-m", "fl_patch")),
        ("--vendor cpu", ("-m", "fl_patch", "--vendor", "cpu")),
        ("--strict --packs none", ("-m", "fl_patch", "--strict", "--packs", "none")),
        ("console script fl-patch", ("fl-patch",)),
    )
    for margin in (0, 40, 100)
]


# ---------------------------------------------------- a first import at interpreter shutdown
# An atexit handler imports a target first. Before threading._shutdown has run (the program
# never imported threading) fl_patch activates and patches as at any other import; after it,
# it says once that it is too late and the import runs as plain python runs it. Never a
# warning about platform detection, a cascade of failed patches, or a crash.
_LAUNCH_WAYS: tuple[tuple[str, tuple[str, ...], dict[str, str]], ...] = (
    ("python -m fl_patch", ("{python}", "-m", "fl_patch", "main.py"), {}),
    ("--in-process", ("{python}", "-m", "fl_patch", "--in-process", "main.py"), {}),
    ("template on PYTHONPATH", ("{python}", "main.py"), {"PYTHONPATH": "{template}:{dir}:{src}"}),
)
_SPURIOUS = ("could not detect the platform", "cannot patch", "Segmentation", "Fatal Python error")


def _late_user_module_case(way: tuple[str, tuple[str, ...], dict[str, str]], threads: bool) -> HostileCase:
    name, command, env = way
    imports = "atexit, threading" if threads else "atexit"
    return HostileCase(
        GROUP,
        f"atexit imports a registered user module first | {name} | {'threading imported' if threads else 'no threading'}",
        {
            "main.py": f"""
                import {imports}
                def late():
                    import late_target
                    print("LATE", late_target.f())
                atexit.register(late)
                print("PROGRAM-OK")
            """,
            "late_target.py": "def f():\n    return 'upstream'\n",
            "late_impl.py": "def f():\n    return 'impl'\n",
            "late_reg.py": "from fl_patch import register\nregister('late_target.f', 'late_impl.f')\n",
        },
        command=command,
        env={
            "FL_PATCH_REGISTRY": "late_reg",
            "FL_PATCH_TRIGGERS": "late_target",
            "FL_PATCH_PACKS": "none",
            "PYTHONPATH": "{dir}:{src}",
            **env,
        },
        stdout=("PROGRAM-OK", "LATE impl"),
        not_stderr=_SPURIOUS,
        strict_same=True,
    )


def _late_megatron_case(way: tuple[str, tuple[str, ...], dict[str, str]], threads: bool) -> HostileCase:
    name, command, env = way
    imports = "atexit, threading" if threads else "atexit"
    return HostileCase(
        GROUP,
        f"atexit imports megatron.core first | {name} | {'threading imported' if threads else 'no threading'}",
        {
            "main.py": f"""
                import {imports}
                def late():
                    import megatron.core.parallel_state
                    print("LATE-IMPORTED")
                atexit.register(late)
                print("PROGRAM-OK")
            """,
        },
        command=command,
        env=env,
        # Plain python's atexit import fails either way here (no triton; or, once threading
        # has shut down, torch's thread pool); the status stays 0, as plain python's does.
        stdout=("PROGRAM-OK",) + (() if threads else ("LATE-IMPORTED",)),
        warns=("too late to activate fl_patch",) if threads else (),
        not_stderr=_SPURIOUS,
        timeout=180,
    )


CASES += [_late_user_module_case(way, threads) for way in _LAUNCH_WAYS for threads in (False, True)]
CASES += [_late_megatron_case(way, threads) for way in _LAUNCH_WAYS[:2] for threads in (False, True)]


# --------------------------------------------- --registry MODULE:FUNCTION, as the variable takes
# The option and its variable (FL_PATCH_REGISTRY) are one reading: every form the variable
# accepts starts a program whose registry function ran, through the option as through it.
_REG_FILES = {
    "main.py": "import reg_target\nprint('PROGRAM-OK', reg_target.f())\n",
    "reg_target.py": "def f():\n    return 'upstream'\n",
    "reg_impl.py": "def f():\n    return 'impl'\n",
    "reg_mod.py": "def setup():\n    from fl_patch import register\n    register('reg_target.f', 'reg_impl.f')\n",
    "reg_plain.py": "from fl_patch import register\nregister('reg_target.f', 'reg_impl.f')\n",
    "reg_other.py": "",
}
_REG_FORMS = ("reg_mod:setup", "reg_plain", " reg_other , reg_mod:setup ", "reg_other,,reg_mod : setup")


def _registry_case(form: str, through: str, launch: tuple[str, ...]) -> HostileCase:
    env = {"FL_PATCH_TRIGGERS": "reg_target", "FL_PATCH_PACKS": "none", "PYTHONPATH": "{dir}:{src}"}
    if through == "option":
        command = ("{python}", "-m", "fl_patch", *launch, "--registry", form, "main.py")
    else:
        command = ("{python}", "-m", "fl_patch", *launch, "main.py")
        env["FL_PATCH_REGISTRY"] = form
    return HostileCase(
        GROUP,
        f"registry {form!r} through the {through} | {' '.join(('python -m fl_patch', *launch))}",
        _REG_FILES,
        command=command,
        env=env,
        stdout=("PROGRAM-OK impl",),
        not_stderr=("FlPatchWarning", "error:"),
        strict_same=True,
    )


CASES += [
    _registry_case(form, through, launch)
    for form in _REG_FORMS
    for through in ("option", "variable")
    for launch in ((), ("--in-process",))
]
