"""Blast radius: fl_patch changes only what the user named (docs/reliability.md, "Blast radius").

fl_patch changes nothing in a process beyond what the user named (a registration's
target; a pack, which only real megatron activates): it adds no imports, children or exits
to programs that never touch a target. Each class below is generated over the ways that
reach it (launch forms, activation ways, layouts, target kinds, tools, wrappers), so that a
fix of one example does not pass: the held-out ones are the same loops with other values.

The children cases ("saying what happened") are here too: a Python child fl_patch cannot
reach, started behind a wrapper (``env -i``, ``timeout``, ``nice``...), is named.
"""

from __future__ import annotations

import shutil

from hostile_case import HostileCase

GROUP = "blast radius"
SAYING = "saying what happened"

# The three ways of activating fl_patch for a program (command prefix, extra environment).
_LAUNCH: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "python -m fl_patch": (("{python}", "-m", "fl_patch"), {}),
    "python -m fl_patch --in-process": (("{python}", "-m", "fl_patch", "--in-process"), {}),
    "sitecustomize on PYTHONPATH": (("{python}",), {"PYTHONPATH": "{template}:{src}"}),
}

_TRANSFER_SAID = "CUDA calls run on the CPU"  # the CUDA-on-CPU transfer's one line

# ---------------------------------------------------------------- 1. a directory named megatron
# A torch-only script; plain python: no CUDA device. The transfer must not switch on because a
# directory on the path is called megatron (only real megatron-core activates a pack).
_TORCH_ONLY = """
    import sys
    {prelude}
    import torch
    print("CUDA", torch.cuda.device_count(), torch.cuda.is_available())
    print("PROGRAM-OK")
"""

_MEGATRON_NAMED: dict[str, tuple[dict[str, str], str, str]] = {
    # layout name -> (extra files, the script's path, the prelude before `import torch`)
    "the script inside a directory named megatron": ({}, "megatron/main.py", ""),
    "the script in x/megatron/scripts": ({}, "x/megatron/scripts/main.py", ""),
    "a sys.path entry under /x/megatron/lib searched first": (
        {"x/megatron/lib/placeholder.txt": "data\n"},
        "main.py",
        "import os; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'x/megatron/lib'))",
    ),
    "a venv named megatron (its site-packages first on sys.path)": (
        {"megatron/.venv/lib/python3.11/site-packages/README": "venv\n"},
        "main.py",
        "import os; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "
        "'megatron/.venv/lib/python3.11/site-packages'))",
    ),
    "an empty megatron directory in the cwd, probed with find_spec": (
        {"megatron/.keep": ""},
        "main.py",
        "import importlib.util; importlib.util.find_spec('megatron')",
    ),
}


def _megatron_named_cases() -> list[HostileCase]:
    cases = []
    for layout, (extra, script, prelude) in _MEGATRON_NAMED.items():
        for launch, (prefix, env) in _LAUNCH.items():
            files = {**extra, script: _TORCH_ONLY.replace("{prelude}", prelude)}
            cases.append(
                HostileCase(
                    GROUP,
                    f"{layout}: a torch-only script keeps torch.cuda as it is ({launch})",
                    files,
                    command=(*prefix, script),
                    env=env,
                    stdout=("CUDA 0 False", "PROGRAM-OK"),
                    not_stderr=(_TRANSFER_SAID,),
                    strict_same=True,
                )
            )
    # The controls: where the user or real megatron asks for it, the transfer is there.
    controls = {
        "real megatron-core imported": ({}, "import megatron.core"),
        "FL_PATCH_TRIGGERS=torch": ({"FL_PATCH_TRIGGERS": "torch"}, ""),
    }
    for asked, (env_extra, prelude) in controls.items():
        for launch, (prefix, env) in _LAUNCH.items():
            program = _TORCH_ONLY.replace("{prelude}", prelude).replace(
                "import torch\n", "import torch\n    torch.cuda.set_device(0)\n", 1
            )
            cases.append(
                HostileCase(
                    GROUP,
                    f"{asked}: the CUDA-on-CPU transfer is on ({launch})",
                    {"main.py": program},
                    command=(*prefix, "main.py"),
                    env={**env, **env_extra},
                    stdout=("CUDA 1 False", "PROGRAM-OK"),
                    warns=(_TRANSFER_SAID,),
                )
            )
    return cases


# ---------------------------------------------------------------- 2. a non-megatron target imports no torch
_IMPL = """
    import json

    _dumps = json.dumps

    def dumps(*args, **kwargs):
        return "PATCHED" + _dumps(*args, **kwargs)

    def f():
        return "PATCHED"

    class Greeter:
        def hello(self):
            return "PATCHED"
"""
_USERMOD = """
    def f():
        return "upstream"

    class Greeter:
        def hello(self):
            return "upstream"
"""
# target -> (its impl, the expression the program prints)
_TARGETS = {
    "json.dumps": ("impl_mod.dumps", "json.dumps(1)"),
    "usermod.f": ("impl_mod.f", "usermod.f()"),
    "usermod.Greeter.hello": ("impl_mod:Greeter.hello", "usermod.Greeter().hello()"),
}
_VENDORS = {"vendor default": ("default", {}), "vendor cpu with MG_FL_PREFER=cpu": ("cpu", {"MG_FL_PREFER": "cpu"})}
_NO_TORCH_PROGRAM = """
    import json, sys
    {install}
    import usermod
    print("RESULT", {expression})
    print("TORCH", "torch" in sys.modules)
    print("PROGRAM-OK")
"""


def _no_torch_cases() -> list[HostileCase]:
    cases = []
    for target, (impl, expression) in _TARGETS.items():
        for vendor_name, (vendor, vendor_env) in _VENDORS.items():
            call = f"register({target!r}, {impl!r}, vendor={vendor!r})"
            base = {
                "impl_mod.py": _IMPL,
                "usermod.py": _USERMOD,
                "reg.py": f"from fl_patch import register\n{call}\n",
                "main.py": _NO_TORCH_PROGRAM.replace("{install}", "").replace("{expression}", expression),
            }
            for launch, (prefix, env) in _LAUNCH.items():
                cases.append(
                    HostileCase(
                        GROUP,
                        f"patching {target} ({vendor_name}) imports no torch ({launch}, FL_PATCH_REGISTRY)",
                        base,
                        command=(*prefix, "main.py"),
                        env={**env, **vendor_env, "FL_PATCH_REGISTRY": "reg"},
                        stdout=("RESULT PATCHED", "TORCH False", "PROGRAM-OK"),
                        not_stderr=(_TRANSFER_SAID,),
                        strict_same=True,
                    )
                )
            in_program = _NO_TORCH_PROGRAM.replace("{install}", f"import fl_patch; fl_patch.{call}; fl_patch.install()")
            cases.append(
                HostileCase(
                    GROUP,
                    f"patching {target} ({vendor_name}) imports no torch (fl_patch.install() in the program)",
                    {**base, "main.py": in_program.replace("{expression}", expression)},
                    command=("{python}", "main.py"),
                    env={**vendor_env, "PYTHONPATH": "{dir}:{src}"},
                    stdout=("RESULT PATCHED", "TORCH False", "PROGRAM-OK"),
                    strict_same=True,
                )
            )
    return cases


# ---------------------------------------------------------------- 3. tools that never import megatron
_CONSOLE_PIP = """
    import re, sys
    from pip._internal.cli.main import main
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""
# tool -> (command after the python, a marker plain python prints)
_TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "pip --version (a console script: sys.path[0] is its bin directory)": (("{dir}/bin/pip", "--version"), "pip "),
    "python -c 'print(1)'": (("-c", "print('TOOL-' + str(1))"), "TOOL-1"),
    "python -m json.tool": (("-m", "json.tool", "{dir}/data/in.json"), '"a": 1'),
    "python -m venv --help": (("-m", "venv", "--help"), "usage:"),
    "python -m platform": (("-m", "platform"), "Linux"),
}
_TOOL_ACTIVATION: dict[str, dict[str, str]] = {
    "sitecustomize on PYTHONPATH": {"PYTHONPATH": "{template}:{src}"},
    "sitecustomize and FL_PATCH_REGISTRY": {"PYTHONPATH": "{template}:{src}", "FL_PATCH_REGISTRY": "reg"},
    "sitecustomize and a registry not on the tool's path": {
        "PYTHONPATH": "{template}:{src}",
        "FL_PATCH_REGISTRY": "nowhere_registry",
    },
}


def _tool_cases() -> list[HostileCase]:
    cases = []
    files = {
        "bin/pip": _CONSOLE_PIP,
        "data/in.json": '{"a": 1}\n',
        "reg.py": "from fl_patch import register\nregister('usermod.f', 'impl_mod.f')\n",
        "usermod.py": _USERMOD,
        "impl_mod.py": _IMPL,
    }
    for tool, (words, marker) in _TOOLS.items():
        for activation, env in _TOOL_ACTIVATION.items():
            cases.append(
                HostileCase(
                    GROUP,
                    f"{tool} runs as plain python ({activation})",
                    files,
                    command=("{python}", *words),
                    env=env,
                    stdout=(marker,),
                    not_stderr=("fl_patch",),
                    strict_same=True,
                )
            )
        # As a child of a launched program: the program's registry is beside it, the tool's cwd is elsewhere.
        program = f"""
            import os, subprocess, sys
            words = [w.replace("{{dir}}", os.path.dirname(os.path.abspath(__file__))) for w in {list(words)!r}]
            proc = subprocess.run([sys.executable, *words], capture_output=True, text=True, cwd="/")
            print(proc.stdout)
            sys.stderr.write(proc.stderr)
            print("TOOL-RC", proc.returncode)
            print("PROGRAM-OK")
        """
        cases.append(
            HostileCase(
                GROUP,
                f"{tool} runs as plain python (a child of python -m fl_patch --registry reg)",
                {**files, "main.py": program},
                command=("{python}", "-m", "fl_patch", "--registry", "reg", "main.py"),
                stdout=(marker, "TOOL-RC 0", "PROGRAM-OK"),
                not_stderr=("fl_patch",),
                strict_same=True,
            )
        )
    return cases


# ---------------------------------------------------------------- 4. a registry that probes in a Python subprocess
_PROBES = {
    "subprocess.run([sys.executable, '-c', ...])": (
        "import subprocess\n"
        "out = subprocess.run([sys.executable, '-c', 'import json, platform; print(platform.machine())'], "
        "capture_output=True, text=True, timeout=60).stdout"
    ),
    "subprocess.check_output with -m": (
        "import subprocess\nout = subprocess.check_output([sys.executable, '-m', 'platform'], text=True, timeout=60)"
    ),
    "os.popen of a python -c line": (
        "import os\nout = os.popen(sys.executable + ' -c \"import json; print(1)\"').read()"
    ),
}


def _fork_bomb_cases() -> list[HostileCase]:
    cases = []
    for probe_name, probe in _PROBES.items():
        # The case bounds itself (BOMB_DEPTH): a regression shows as LOADS > 1, not as a chain of
        # processes that outlives the case's timeout (which kills only the first of them).
        registry = (
            "import os, sys\n"
            "with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'loads.txt'), 'a') as f:\n"
            "    f.write('x')\n"
            "depth = int(os.environ.get('BOMB_DEPTH', '0'))\n"
            "os.environ['BOMB_DEPTH'] = str(depth + 1)\n"
            "if depth < 4:\n"
            + "".join(f"    {line}\n" for line in probe.splitlines())
            + "    assert out.strip(), 'the probe printed nothing'\n"
            "from fl_patch import register\n"
            "register('usermod.f', 'impl_mod.f')\n"
        )
        program = """
            import os, usermod
            print("RESULT", usermod.f())
            print("LOADS", len(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "loads.txt")).read()))
            print("PROGRAM-OK")
        """
        files = {"reg.py": registry, "main.py": program, "usermod.py": _USERMOD, "impl_mod.py": _IMPL}
        for launch, (prefix, env) in _LAUNCH.items():
            cases.append(
                HostileCase(
                    GROUP,
                    f"a registry probing with {probe_name} loads once ({launch})",
                    files,
                    command=(*prefix, "main.py"),
                    env={**env, "FL_PATCH_REGISTRY": "reg", "PYTHONPATH": env.get("PYTHONPATH", "{src}") + ":{dir}"},
                    stdout=("RESULT PATCHED", "LOADS 1", "PROGRAM-OK"),
                    strict_same=True,
                    timeout=40.0,
                )
            )
    return cases


# ---------------------------------------------------------------- 5. a FlagScale tree nobody named
_TREE = {
    "megatron/plugin/__init__.py": "",
    "megatron/plugin/override_registry.py": "print('TREE-RAN')\n",
}
_NOT_LOADED = "FlagScale plugin tree at"
_TREE_PROGRAM = """
    import megatron.core
    print("PROGRAM-OK")
"""


def _tree_cases() -> list[HostileCase]:
    cases = []
    unnamed = {
        "next to the script, run by its path from elsewhere": (
            {f"job/{k}": v for k, v in _TREE.items()} | {"job/main.py": _TREE_PROGRAM},
            ("{dir}/job/main.py",),
        ),
        "in the cwd, python -m mod": ({**_TREE, "prog/jobmod.py": _TREE_PROGRAM}, ("-m", "jobmod")),
        "in the cwd, python -c": (dict(_TREE), ("-c", "import megatron.core; print('PROGRAM-OK')")),
    }
    for layout, (files, words) in unnamed.items():
        for launch in ("python -m fl_patch", "sitecustomize on PYTHONPATH"):
            prefix, env = _LAUNCH[launch]
            path = env.get("PYTHONPATH", "{src}") + (":{dir}/prog" if "jobmod" in words else "")
            cases.append(
                HostileCase(
                    GROUP,
                    f"a FlagScale tree {layout} does not run unnamed, and is said ({launch})",
                    files,
                    command=(*prefix, *words),
                    env={**env, "PYTHONPATH": path},
                    stdout=("PROGRAM-OK",),
                    not_stdout=("TREE-RAN",),
                    warns=(_NOT_LOADED, "is not loaded", "FL_PATCH_FLAGSCALE=1"),
                    strict_same=True,
                )
            )
    named = {
        "on PYTHONPATH": {"PYTHONPATH": "{src}:{dir}/job"},
        "with FL_PATCH_FLAGSCALE=1": {"FL_PATCH_FLAGSCALE": "1"},
    }
    for how, env in named.items():
        cases.append(
            HostileCase(
                GROUP,
                f"a FlagScale tree named {how} runs",
                {f"job/{k}": v for k, v in _TREE.items()} | {"job/main.py": _TREE_PROGRAM},
                command=("{python}", "-m", "fl_patch", "{dir}/job/main.py"),
                env=env,
                stdout=("TREE-RAN", "PROGRAM-OK"),
                warns=("FlagScale plugin tree loaded from",),
            )
        )
    return cases


# ---------------------------------------------------------------- 6. stdlib names planted in the cwd
_PLANTED = ("json", "shlex", "subprocess", "tempfile", "typing", "argparse", "dataclasses", "inspect", "textwrap")
_PATH_PROGRAM = """
    import os, sys
    here = os.path.dirname(os.path.realpath(__file__))
    expected = os.path.realpath(os.getcwd()) if __spec__ is not None and __spec__.name == "progmod" else here
    print("PATH0-OK" if os.path.realpath(sys.path[0]) == expected else f"PATH0-WRONG {sys.path[:3]}")
    print("PROGRAM-OK")
"""
_FORMS = {
    "python -m fl_patch /abs/x.py": ("{python}", "-m", "fl_patch", "{dir}/prog/x.py"),
    "python -m fl_patch prog/x.py (relative)": ("{python}", "-m", "fl_patch", "prog/x.py"),
    "python -m fl_patch --in-process /abs/x.py": ("{python}", "-m", "fl_patch", "--in-process", "{dir}/prog/x.py"),
    "python -m fl_patch -m mod": ("{python}", "-m", "fl_patch", "-m", "progmod"),
    "python -m fl_patch --in-process -m mod": ("{python}", "-m", "fl_patch", "--in-process", "-m", "progmod"),
}


def _planted_cases() -> list[HostileCase]:
    cases = []
    for name in _PLANTED:
        for form, command in _FORMS.items():
            files = {
                f"{name}.py": "print('PLANTED-RAN')\nraise SystemExit(7)\n",
                "prog/x.py": _PATH_PROGRAM,
                "prog/progmod.py": _PATH_PROGRAM,
            }
            cases.append(
                HostileCase(
                    GROUP,
                    f"a {name}.py planted in the cwd is not imported by the launcher ({form})",
                    files,
                    command=command,
                    env={"PYTHONPATH": "{src}:{dir}/prog"},
                    stdout=("PATH0-OK", "PROGRAM-OK"),
                    not_stdout=("PLANTED-RAN",),
                    strict_same=True,
                )
            )
    return cases


# ---------------------------------------------------------------- 7. children behind wrappers
# Where fl_patch cannot even be imported (env -i: no PYTHONPATH), the child says None.
_CHILD = "try:\n    import fl_patch\nexcept ImportError:\n    print('CHILD-RAN None')\nelse:\n    print('CHILD-RAN', fl_patch.is_active())"
_UNREACHED = "will not run with this process's patches: its environment has no fl_patch bootstrap directory"
# wrapper -> its words before the command (None: not on this machine)
_WRAPPERS: dict[str, tuple[str, ...]] = {
    "env": ("env",),
    "timeout": ("timeout", "-k", "5", "30"),
    "nice -n": ("nice", "-n", "5"),
    "nohup": ("nohup",),
    "stdbuf": ("stdbuf", "-oL"),
    "setsid": ("setsid",),
    "taskset": ("taskset", "-c", "0"),
    "ionice": ("ionice", "-c", "3"),
    "chrt": ("chrt", "-o", "0"),
    "/usr/bin/time -p": ("/usr/bin/time", "-p"),
}
_CLEARING = {
    "env -i": ("env", "-i"),
    "env -u PYTHONPATH": ("env", "-u", "PYTHONPATH"),
    "env -i PATH=/usr/bin": ("env", "-i", "PATH=/usr/bin"),
}


def _available(words: tuple[str, ...]) -> bool:
    return shutil.which(words[0]) is not None


def _child_cases() -> list[HostileCase]:
    cases = []
    for wrapper, words in _WRAPPERS.items():
        if not _available(words):
            continue
        for clearing in ((), *_CLEARING.values()):
            if wrapper == "env" and clearing:
                prefix = clearing  # env -i is itself the env wrapper
            else:
                prefix = (*words, *clearing)
            for shell in (False, True):
                argv = [*prefix, "{python}", "-c", _CHILD]
                program = f"""
                    import shlex, subprocess, sys
                    argv = [w.replace("{{python}}", sys.executable) for w in {argv!r}]
                    if {shell!r}:
                        proc = subprocess.run(shlex.join(argv), shell=True, capture_output=True, text=True)
                    else:
                        proc = subprocess.run(argv, capture_output=True, text=True)
                    print(proc.stdout)
                    print("CHILD-RC", proc.returncode)
                    print("PROGRAM-OK")
                """
                label = " ".join(prefix)
                common = {"files": {"main.py": program}, "command": ("{python}", "-m", "fl_patch", "main.py")}
                if clearing:
                    cases.append(
                        HostileCase(
                            SAYING,
                            f"a child behind `{label}` (shell={shell}) is out of reach and named",
                            **common,
                            stdout=("CHILD-RAN", "CHILD-RC 0", "PROGRAM-OK"),
                            not_stdout=("CHILD-RAN True",),
                            warns=(_UNREACHED, " -c try:"),
                        )
                    )
                else:
                    cases.append(
                        HostileCase(
                            SAYING,
                            f"a child behind `{label}` (shell={shell}) keeps fl_patch and nothing is said",
                            **common,
                            stdout=("CHILD-RAN True", "CHILD-RC 0", "PROGRAM-OK"),
                            not_stderr=("will not run with this process's patches",),
                        )
                    )
    return cases


CASES = [
    *_megatron_named_cases(),
    *_no_torch_cases(),
    *_tool_cases(),
    *_fork_bomb_cases(),
    *_tree_cases(),
    *_planted_cases(),
    *_child_cases(),
]
