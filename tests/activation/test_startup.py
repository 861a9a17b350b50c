"""Start-up (fl_patch.activation.startup): arm at interpreter start, install at the first import that needs it."""

from __future__ import annotations

import json
import os

from ..conftest import REPO, clean_env

TEMPLATE = REPO / "sitecustomize_template"


def _env(**variables: str) -> dict[str, str]:
    env = clean_env(**variables)
    env["PYTHONPATH"] = os.pathsep.join([str(TEMPLATE), env["PYTHONPATH"]])
    return env


def _last_json(stdout: str) -> object:
    return json.loads(stdout.strip().splitlines()[-1])


def test_a_process_that_never_imports_megatron_loads_no_engine(run_python) -> None:
    code = (
        "import json, sys, fl_patch\n"
        "print(json.dumps([fl_patch.is_active(), sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('fl_patch', 'wrapt', 'torch', 'megatron'))]))"
    )
    active, loaded = _last_json(run_python("-c", code, env=_env()).stdout)
    assert active  # armed
    assert not any(name.split(".")[0] in ("wrapt", "torch", "megatron") for name in loaded), loaded
    assert "fl_patch.engine.engine" not in loaded and "fl_patch.activation.install" not in loaded


def test_the_first_megatron_import_installs_and_is_itself_patched(run_python) -> None:
    code = (
        "import json, sys, fl_patch\n"
        "import megatron.core\n"
        "r = {x.target: x for x in fl_patch.report() if x.vendor == x.chosen_vendor}\n"
        "stub = r['megatron.core.transformer.moe.ops.paged_stash']\n"
        "print(json.dumps([fl_patch.is_installed(), stub.status.value, stub.detail, stub.late]))"
    )
    # The CPU pack replaces a module megatron.core imports during its own first import:
    # only an install that happens before megatron.core's body runs can do that.
    out = _last_json(run_python("-c", code, env=_env(FL_PATCH_PACKS="cpu")).stdout)
    assert out == [True, "applied", "replaced before its first import", False]


def test_a_registry_that_imports_the_module_being_found_does_not_load_it_twice(run_python) -> None:
    code = (
        "import json, fltest_once\n"
        "import fltest_once.target as t\n"
        "print(json.dumps([fltest_once.EXECUTIONS, t.greet()]))"
    )
    env = _env(FL_PATCH_PACKS="none", FL_PATCH_REGISTRY="fltest_once.registry")
    assert _last_json(run_python("-c", code, env=env).stdout) == [["fltest_once.target"], "patched"]


def test_triggers_name_other_packages(run_python) -> None:
    code = "import json, sys, fl_patch\nimport fltest_once\nprint(json.dumps([fl_patch.is_installed()]))"
    assert _last_json(run_python("-c", code, env=_env(FL_PATCH_PACKS="none")).stdout) == [False]
    env = _env(FL_PATCH_PACKS="none", FL_PATCH_TRIGGERS="fltest_once")
    assert _last_json(run_python("-c", code, env=env).stdout) == [True]
