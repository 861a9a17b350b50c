"""Identity and kinds of targets (docs/reliability.md, "Identity and kinds of targets").

Whole programs under ``python -m fl_patch`` (default and ``--report``, a diagnostic mode that
must not change behaviour): a library function used as an impl is never written on; an impl
that calls ``Target.__wrapped__`` or ``fl_patch.original`` works in both modes; ``isinstance`` holds for objects and
subclasses made before a class was replaced; an ``lru_cache``d target keeps ``cache_clear``.
In-process generated variants are in ``tests/core/test_kinds.py``. No case has an fl_patch
problem in it, so strict mode must run each exactly as default mode does.
"""

from __future__ import annotations

from hostile_case import HostileCase

GROUP = "identity and kinds"

_ENV = {"PYTHONPATH": "{dir}:{src}", "FL_PATCH_PACKS": "none", "FL_PATCH_REGISTRY": "reg", "FL_PATCH_TRIGGERS": "tpkg"}

_PROGRAMS: dict[str, dict[str, str]] = {
    "a library function used as an impl is not written on": {
        "tpkg/__init__.py": "",
        "tpkg/m.py": "def act(text):\n    return ('upstream', text)\n",
        "reg.py": "from fl_patch import register\nregister('tpkg.m.act', 'textwrap.dedent')\n",
        "main.py": """
            import inspect, textwrap
            before = dict(vars(textwrap.dedent))
            from tpkg import m
            assert m.act('  x\\n') == 'x\\n', m.act('  x\\n')
            assert inspect.unwrap(textwrap.dedent) is textwrap.dedent
            assert dict(vars(textwrap.dedent)) == before, vars(textwrap.dedent)
            assert m.act.__wrapped__.__module__ == 'tpkg.m'
            print('PROGRAM-OK')
        """,
    },
    # The two ways an impl reaches the original (docs/writing-a-plugin.md): FlagScale's
    # ``Target.__wrapped__``, decorated impl included, and ``fl_patch.original``. (The impl's own
    # ``__wrapped__`` is nothing fl_patch writes: the vendor's function is never written on.)
    "an impl calling Target.__wrapped__ (FlagScale's way), decorated": {
        "tpkg/__init__.py": "",
        "tpkg/m.py": "def act(x):\n    return x + 1\n",
        "impl.py": (
            "import functools\nimport tpkg.m\n"
            "def traced(f):\n    @functools.wraps(f)\n    def inner(*a):\n        return f(*a)\n    return inner\n"
            "@traced\ndef act(x):\n    return 10 * tpkg.m.act.__wrapped__(x)\n"
        ),
        "reg.py": "from fl_patch import register\nregister('tpkg.m.act', 'impl.act')\n",
        "main.py": "from tpkg import m\nassert m.act(1) == 20, m.act(1)\nprint('PROGRAM-OK')\n",
    },
    "an impl calling fl_patch.original": {
        "tpkg/__init__.py": "",
        "tpkg/m.py": "def act(x):\n    return x + 1\n",
        "impl.py": "import fl_patch\ndef act(x):\n    return 10 * fl_patch.original('tpkg.m.act')(x)\n",
        "reg.py": "from fl_patch import register\nregister('tpkg.m.act', 'impl.act')\n",
        "main.py": "from tpkg import m\nassert m.act(1) == 20, m.act(1)\nprint('PROGRAM-OK')\n",
    },
    "isinstance for objects and subclasses made before a late class replacement": {
        "tpkg/__init__.py": "",
        "tpkg/m.py": "class Config:\n    def name(self):\n        return 'upstream'\n",
        "tpkg/sub.py": "from tpkg.m import Config\nclass MLAConfig(Config):\n    pass\n",
        "impl.py": "from tpkg.m import Config\nclass Config(Config):\n    def name(self):\n        return 'impl'\n",
        "reg.py": "",
        "main.py": """
            from tpkg import m, sub
            old = m.Config()
            import fl_patch
            fl_patch.register('tpkg.m.Config', 'impl.Config')
            assert m.Config().name() == 'impl'
            assert isinstance(old, m.Config) and isinstance(sub.MLAConfig(), m.Config)
            assert issubclass(sub.MLAConfig, m.Config)
            print('PROGRAM-OK')
        """,
    },
    "an lru_cache'd method keeps its cache API": {
        "tpkg/__init__.py": "",
        "tpkg/m.py": "import functools\nclass Rope:\n    @functools.lru_cache\n    def forward(self, n):\n        return n\n",
        "impl.py": "def forward(self, n):\n    return 2 * n\n",
        "reg.py": "from fl_patch import register\nregister('tpkg.m.Rope.forward', 'impl.forward')\n",
        "main.py": """
            from tpkg import m
            r = m.Rope()
            assert r.forward(3) == 6, r.forward(3)
            m.Rope.forward.cache_clear()
            print('PROGRAM-OK')
        """,
    },
}

CASES = [
    HostileCase(
        GROUP,
        f"{name} ({'--report' if report else 'default'})",
        files,
        command=("{python}", "-m", "fl_patch", *(["--report"] if report else []), "main.py"),
        env=_ENV,
        strict_same=True,
        not_stderr=("FlPatchWarning", "Traceback"),
    )
    for name, files in _PROGRAMS.items()
    for report in (False, True)
]
