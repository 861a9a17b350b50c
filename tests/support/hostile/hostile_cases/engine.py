"""The engine: never hang, the whole parent chain, late register(), saying what happened at import time.

Each class is generated over its variants (docs/reliability.md, RELIABILITY_SECTION.md of the
engine-hooks branch): the deadlock over what the impl's worker imports x how the impl waits for
it; the parent chain over depth x which ancestor is still loading (synthetic and real
megatron-core); the import-time reports over the ways a module gets past the hook.
"""

from __future__ import annotations

from hostile_case import HostileCase

NEVER_BREAK = "never break the run"
SAYING = "saying what happened"

# The synthetic cases run with the shipped packs off, as the group's others do (docs/reliability.md,
# "Never break the run"): with them on, the trigger's install imports torch for the CPU pack, about
# two CPU-seconds a run that the cases here do not touch; the real-megatron cases (_MEGATRON_ENV) keep them.
_ENV = {"FL_PATCH_REGISTRY": "reg", "FL_PATCH_TRIGGERS": "pkg", "FL_PATCH_PACKS": "none", "PYTHONPATH": "{dir}:{src}"}
_MEGATRON_ENV = {"FL_PATCH_REGISTRY": "reg", "PYTHONPATH": "{dir}:{src}"}

# ---------------------------------------------------------------------------------------- deadlock
# An impl that, at its import, has a worker thread import the target's module (or its package, or a
# module importing it) and waits for it. fl_patch imports the impl inside the target's import, so
# without care the worker waits for the module lock this thread holds: a hang plain python never has.

_WORKER_IMPORTS = {
    "the target module": "import pkg.target_mod as seen",
    "its package, still loading": "import pkg as _pkg\nseen = _pkg.target_mod",
    "a module importing it": "import user_mod\nseen = user_mod.target_mod",
    # binds the original by `from ... import f` while the impl loads: the window's alias sweep rebinds it
    "a module binding f from it": "import user_bind as seen",
}

_WAITS = {
    "thread join": ("import threading\nworker = threading.Thread(target=work)\nworker.start()\nworker.join()\n"),
    "thread join with timeout": (
        "import threading\nworker = threading.Thread(target=work)\nworker.start()\nworker.join(timeout=15)\n"
    ),
    "concurrent.futures result": (
        "import concurrent.futures\n"
        "pool = concurrent.futures.ThreadPoolExecutor(1)\n"
        "pool.submit(work).result()\n"
        "pool.shutdown()\n"
    ),
    "event set after the import": (
        "import threading\n"
        "imported = threading.Event()\n"
        "worker = threading.Thread(target=work)\n"
        "worker.start()\n"
        "imported.wait()\n"
    ),
}


def _deadlock_case(what: str, how: str) -> HostileCase:
    work = (
        "import threading\n"
        "go = threading.Event()\n"
        "box = {}\n"
        "def work():\n"
        + "".join(f"    {line}\n" for line in _WORKER_IMPORTS[what].splitlines())
        + "    box['module'] = seen\n"
    )
    if how == "event set after the import":
        # This worker outlives the import: it calls through the module once the program says go.
        work += "    imported.set()\n    go.wait(30)\n    box['call'] = seen.f()\n"
    impl = work + _WAITS[how] + "DONE = 'module' in box\ndef f():\n    return 'impl'\n"
    main = """
        import pkg.target_mod, impl_mod
        print('CALL=' + pkg.target_mod.f())
        print('WORKER-IMPORTED' if impl_mod.DONE else 'WORKER-STILL-WAITING')
        impl_mod.go.set()
        import threading
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join(30)
        # A joined worker is done before the impl is defined: it calls through the module it got.
        print('WORKER-CALL=' + (impl_mod.box.get('call') or impl_mod.box['module'].f()))
        print('PROGRAM-OK')
    """
    package = "from . import target_mod\n" if what == "its package, still loading" else ""
    return HostileCase(
        NEVER_BREAK,
        f"impl's worker imports {what} ({how}): no hang, worker sees the patch",
        {
            "main.py": main,
            "pkg/__init__.py": package,
            "pkg/target_mod.py": "def f():\n    return 'upstream'\n",
            "user_mod.py": "import pkg.target_mod\nfrom pkg import target_mod\n",
            "user_bind.py": "from pkg.target_mod import f\n",
            "impl_mod.py": impl,
            "reg.py": "from fl_patch import register\nregister('pkg.target_mod.f', 'impl_mod.f')\n",
        },
        env=_ENV,
        stdout=("CALL=impl", "WORKER-IMPORTED", "WORKER-CALL=impl", "PROGRAM-OK"),
        timeout=40,
    )


DEADLOCK = [_deadlock_case(what, how) for what in _WORKER_IMPORTS for how in _WAITS]

# The same on real megatron-core: the impl of a function in megatron.core.utils (loaded while
# megatron.core itself is loading) has a worker import megatron.core and waits for it.
_DEADLOCK_MEGATRON = HostileCase(
    NEVER_BREAK,
    "megatron impl's worker imports megatron.core while it loads: no hang",
    {
        "main.py": """
            import megatron.core.utils as u
            print('CALL=' + str(u.is_torch_min_version('0.0')))
            import impl_mod
            print('WORKER-IMPORTED' if impl_mod.DONE else 'WORKER-STILL-WAITING')
            print('PROGRAM-OK')
        """,
        "impl_mod.py": """
            import threading
            box = {}
            def work():
                import megatron.core
                import megatron.core.utils
                box['utils'] = megatron.core.utils
            worker = threading.Thread(target=work)
            worker.start()
            worker.join()
            DONE = 'utils' in box
            def is_torch_min_version(version, check_equality=True):
                return 'impl'
        """,
        "reg.py": (
            "from fl_patch import register\n"
            "register('megatron.core.utils.is_torch_min_version', 'impl_mod.is_torch_min_version')\n"
        ),
    },
    env=_MEGATRON_ENV,
    stdout=("CALL=impl", "WORKER-IMPORTED", "PROGRAM-OK"),
    timeout=150,
)

# ------------------------------------------------------------------------------------ parent chain
# An impl that does `import a.b.c.d` and uses `a.b.c.d.name` at its import: every package on the way
# must have its submodule attribute, though some are still loading (their body imports the next).


def _chain_case(depth: int, loading_from: int) -> HostileCase:
    """Package ``p0.p1...`` of ``depth`` levels; levels ``loading_from..depth-1`` import the next level
    from their ``__init__`` (so they are still loading while the target module's impl loads)."""
    names = [".".join(f"p{i}" for i in range(level + 1)) for level in range(depth)]
    target = names[-1] + ".target_mod"
    files: dict[str, str] = {}
    for level, name in enumerate(names):
        child = names[level + 1].rpartition(".")[2] if level + 1 < depth else "target_mod"
        body = f"from . import {child}\n" if level >= loading_from else ""
        files[name.replace(".", "/") + "/__init__.py"] = body
    files[target.replace(".", "/") + ".py"] = "HELPER = 'helper'\ndef f():\n    return 'upstream'\n"
    files["impl_mod.py"] = f"import {target}\nPREFIX = {target}.HELPER\ndef f():\n    return 'impl:' + PREFIX\n"
    files["reg.py"] = f"from fl_patch import register\nregister('{target}.f', 'impl_mod.f')\n"
    files["main.py"] = f"import {names[0]}\nimport {target}\nprint('CALL=' + {target}.f())\nprint('PROGRAM-OK')\n"
    return HostileCase(
        NEVER_BREAK,
        f"impl reaches its target through the packages: depth {depth}, loading from level {loading_from}",
        files,
        env={**_ENV, "FL_PATCH_TRIGGERS": "p0"},
        stdout=("CALL=impl:helper", "PROGRAM-OK"),
        not_stderr=("FlPatchWarning",),
        timeout=30,
    )


_CHAIN = [_chain_case(depth, start) for depth in (2, 3, 5) for start in range(depth)]


def _megatron_chain_case(target_module: str, attribute: str, function: str) -> HostileCase:
    return HostileCase(
        NEVER_BREAK,
        f"megatron impl reaches {target_module}.{attribute} through the packages",
        {
            # the code that runs is the impl's (the installed function wears upstream's name and module)
            "main.py": f"import megatron.core, os\nimport {target_module} as m\n"
            f"print('CALL=' + os.path.basename(m.{function}.__code__.co_filename))\n"
            "print('PROGRAM-OK')\n",
            "impl_mod.py": f"import {target_module}\nUSED = {target_module}.{attribute}\n"
            f"def {function}(*args, **kwargs):\n    return USED\n",
            "reg.py": f"from fl_patch import register\nregister('{target_module}.{function}', 'impl_mod.{function}')\n",
        },
        env=_MEGATRON_ENV,
        stdout=("CALL=impl_mod.py", "PROGRAM-OK"),
        not_stderr=("cannot patch",),
        timeout=150,
    )


_CHAIN_MEGATRON = [
    # megatron.core -> distributed -> finalize_model_grads -> pipeline_parallel (all loading)
    _megatron_chain_case("megatron.core.pipeline_parallel.utils", "is_pp_first_stage", "is_pp_last_stage"),
    # megatron.core -> ... -> tensor_parallel (loading) -> its layers module
    _megatron_chain_case(
        "megatron.core.tensor_parallel.layers", "VocabParallelEmbedding", "set_tensor_model_parallel_attributes"
    ),
]

# ------------------------------------------------------------------ registered while its module imports
# The module's import began before any registration named it (so past the hook); the registration
# comes from inside its body (before or after the def) or from another thread during the import. The
# first call by an importer must run the impl.

_REGISTER_IN_BODY = "from fl_patch import register\nregister('{target}', 'impl_mod.f')\n"
_REGISTER_FROM_THREAD = (
    "import threading\n"
    "from fl_patch import register\n"
    "registering = threading.Thread(target=register, args=('{target}', 'impl_mod.f'))\n"
    "registering.start()\n"
    "registering.join()\n"
)
_LAUNCH = {
    "install() in the program": (("{python}", "main.py"), "import fl_patch\nfl_patch.install()\n"),
    # (armed until a trigger package imports: `trig`, empty, is one in these cases)
    "python -m fl_patch": (("{python}", "-m", "fl_patch", "main.py"), "import fl_patch, trig\n"),
}


def _registered_while_importing(where: str, when: str, module: str, launch: str) -> HostileCase:
    command, activation = _LAUNCH[launch]
    target = f"{module}.f"
    registering = (_REGISTER_IN_BODY if where == "its own body" else _REGISTER_FROM_THREAD).format(target=target)
    definition = "def f():\n    return 'upstream'\n"
    body = registering + definition if when == "before the def" else definition + registering
    files = {
        module.replace(".", "/") + ".py": body,
        "impl_mod.py": "def f():\n    return 'impl'\n",
        "trig.py": "",
        "main.py": activation + f"import {module}\nprint('FIRST-CALL=' + {module}.f())\nprint('PROGRAM-OK')\n",
    }
    if "." in module:
        files[module.partition(".")[0] + "/__init__.py"] = ""
    return HostileCase(
        SAYING,
        f"registered from {where}, {when}, while {module} imports ({launch}): first call runs the impl",
        files,
        command=command,
        env={"PYTHONPATH": "{dir}:{src}", "FL_PATCH_PACKS": "none", "FL_PATCH_TRIGGERS": "trig"},
        stdout=("FIRST-CALL=impl", "PROGRAM-OK"),
        timeout=30,
    )


_REGISTERED_WHILE_IMPORTING = [
    _registered_while_importing(where, when, module, launch)
    for where in ("its own body", "another thread")
    for when in ("before the def", "after the def")
    for module in ("solo_mod", "pkg.sub_mod")
    for launch in _LAUNCH
    if launch == "install() in the program" or module == "solo_mod"
]

# ------------------------------------------------------------------ many sys.modules deletions in a body
# A target module whose body imports a circular importer (which binds `from pkg.target_mod import f`
# early) and purges many previously loaded modules from sys.modules: the early alias must still be
# rebound, however many entries the body deleted (there was a bound of 32).


def _purge_case(deleted: int, order: str, launch: str) -> HostileCase:
    command, activation = _LAUNCH[launch]
    purge = "for name in [n for n in list(sys.modules) if n.startswith('helper_')]:\n    del sys.modules[name]\n"
    early = "import pkg.early\n"
    body = "import sys\ndef f():\n    return 'upstream'\n" + (early + purge if order == "after" else purge + early)
    return HostileCase(
        NEVER_BREAK,
        f"body deletes {deleted} sys.modules entries {order} a circular import binds f early ({launch})",
        {
            "pkg/__init__.py": "",
            "pkg/target_mod.py": body,
            "pkg/early.py": "from pkg.target_mod import f\ndef call():\n    return f()\n",
            "impl_mod.py": "def f():\n    return 'impl'\n",
            "trig.py": "",
            "reg.py": "from fl_patch import register\nregister('pkg.target_mod.f', 'impl_mod.f')\n",
            "main.py": activation
            + "import sys, types\n"
            + f"for i in range({deleted}):\n    sys.modules[f'helper_{{i}}'] = types.ModuleType(f'helper_{{i}}')\n"
            + "import pkg.target_mod, pkg.early\n"
            + "print('CALL=' + pkg.target_mod.f())\nprint('EARLY-ALIAS=' + pkg.early.call())\nprint('PROGRAM-OK')\n",
        },
        command=command,
        env=_ENV,
        stdout=("CALL=impl", "EARLY-ALIAS=impl", "PROGRAM-OK"),
        timeout=30,
    )


_PURGES = [_purge_case(n, order, launch) for n in (10, 33, 200) for order in ("before", "after") for launch in _LAUNCH]

# ------------------------------------------------------------------ sys.meta_path restored past the hook
# A fixture saves sys.meta_path before fl_patch is installed and restores it after; then a target
# module is imported from a directory the import system has seen before (so no path hook is asked).
# The module must be patched by its first call, and that the hook had been taken out said, naming it.

_REMOVALS = {
    "meta_path[:] = saved": ("saved = sys.meta_path[:]\n", "sys.meta_path[:] = saved\n"),
    "meta_path = saved": ("saved = list(sys.meta_path)\n", "sys.meta_path = saved\n"),
    "filtered out": (
        "",
        "sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith('fl_patch.hooks')]\n",
    ),
}

_PLACES = {
    # module path, the directory it lives in (relative), and what was imported from there before
    "the program's directory": ("solo_target", "", "import seen_before\n"),
    "a package imported before": ("pkg.target_mod", "", "import pkg.other\n"),
    "a second sys.path directory": ("far_target", "far", "import seen_before, far_seen\n"),
}


def _restored_case(removal: str, place: str, launch: str) -> HostileCase:
    command, _ = _LAUNCH[launch]
    save, restore = _REMOVALS[removal]
    module, directory, before = _PLACES[place]
    prefix = f"{directory}/" if directory else ""
    activation = "fl_patch.install()\n" if launch == "install() in the program" else "import trig\n"
    main = (
        "import sys, fl_patch\n"
        + before
        + save
        + activation
        + restore
        + f"import {module}\n"
        + f"print('FIRST-CALL=' + {module}.f())\n"
        + "print('STATUS=' + ' '.join(r.status.value for r in fl_patch.report()))\n"
        + "print('PROGRAM-OK')\n"
    )
    files = {
        "main.py": main,
        "seen_before.py": "",
        "trig.py": "",
        "pkg/__init__.py": "",
        "pkg/other.py": "",
        "far/far_seen.py": "",
        prefix + module.replace(".", "/") + ".py": "def f():\n    return 'upstream'\n",
        "impl_mod.py": "def f():\n    return 'impl'\n",
        "reg.py": f"from fl_patch import register\nregister('{module}.f', 'impl_mod.f')\n",
    }
    return HostileCase(
        SAYING,
        f"sys.meta_path restored ({removal}), target in {place} ({launch}): patched and said",
        files,
        command=command,
        env={
            "FL_PATCH_REGISTRY": "reg",
            "FL_PATCH_TRIGGERS": "trig",
            "FL_PATCH_PACKS": "none",
            "PYTHONPATH": "{dir}:{dir}/far:{src}",
        },
        stdout=("FIRST-CALL=impl", "STATUS=applied", "PROGRAM-OK"),
        warns=("sys.meta_path", module),
        timeout=30,
    )


_RESTORED = [
    _restored_case(removal, place, launch)
    for removal in _REMOVALS
    for place in _PLACES
    for launch in _LAUNCH
    # (under python -m fl_patch with a registry named, fl_patch installs at the program's first
    # import, so a copy saved in the program already holds the finder: only filtering removes it)
    if launch == "install() in the program" or removal == "filtered out"
]

_RESTORED_MEGATRON = HostileCase(
    SAYING,
    "sys.meta_path restored after install(), then megatron.core imported: patched and said",
    {
        "main.py": """
            import sys, fl_patch
            saved = sys.meta_path[:]
            fl_patch.install()
            sys.meta_path[:] = saved
            import megatron.core.utils as u
            print('FIRST-CALL=' + str(u.is_torch_min_version('0.0')))
            print('PROGRAM-OK')
        """,
        "impl_mod.py": "def is_torch_min_version(version, check_equality=True):\n    return 'impl'\n",
        "reg.py": (
            "from fl_patch import register\n"
            "register('megatron.core.utils.is_torch_min_version', 'impl_mod.is_torch_min_version')\n"
        ),
    },
    command=("{python}", "main.py"),
    env=_MEGATRON_ENV,
    stdout=("FIRST-CALL=impl", "PROGRAM-OK"),
    warns=("sys.meta_path", "megatron"),
    timeout=150,
)

CASES = [
    *DEADLOCK,
    _DEADLOCK_MEGATRON,
    *_CHAIN,
    *_CHAIN_MEGATRON,
    *_REGISTERED_WHILE_IMPORTING,
    *_PURGES,
    *_RESTORED,
    _RESTORED_MEGATRON,
]
