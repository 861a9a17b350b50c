"""Hostile undo: uninstall() restores only what it changed; reloads and purges of patched modules.

From the issue "What real programs do to an import hook":

- ``uninstall()`` must put back exactly the names fl_patch rebound, and leave alone a
  name bound to the impl object by someone else (a vendor's own module using its impl);
- a whole-module replacement keeps its own ``__spec__``, and ``importlib.reload`` of it
  never runs the upstream module's code into the plugin's module;
- ``del sys.modules[name]`` + re-import, repeated, lets the old module objects be freed.

Real megatron-core 0.19.2 targets throughout.
"""

from __future__ import annotations

import gc
import importlib
import json
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

import fl_patch

from ..conftest import REPO, clean_env, fresh_modules

GRAD_NORM = "megatron.core.optimizer.clip_grads.get_grad_norm_fp32"
PAGED_STASH = "megatron.core.transformer.moe.ops.paged_stash"
PAGED_STASH_IMPL = "fl_patch.impls.cpu.paged_stash_ops"

VENDOR_NORMS = """
def get_grad_norm_fp32(grads_for_norm, norm_type=2, grad_stats_parallel_group=None):
    return "vendor norm"
"""
VENDOR_HELPERS = """
# The vendor's own code calls its impl by name: fl_patch never patched this module.
from megatron.fltest_vendor_ops.norms import get_grad_norm_fp32 as vendor_norm


def total_norm(grads):
    return vendor_norm(grads)
"""


def test_uninstall_leaves_alone_a_name_it_never_patched(megatron_core, engine, tmp_path: Path, monkeypatch) -> None:
    """Bullet: uninstall() rebinds names it never patched (a name bound to the impl object elsewhere).

    A FlagScale-style vendor tree lives in the ``megatron`` namespace
    (megatron/fltest_vendor_ops/): norms.py holds the impl, helpers.py imports it as
    ``vendor_norm`` after installation. uninstall() today points ``helpers.vendor_norm``
    at upstream's get_grad_norm_fp32 (every name in ``megatron.*`` holding the impl is
    "restored"). Expected: the target and the aliases fl_patch recorded go back to
    upstream; helpers.vendor_norm stays the vendor's function.
    """
    package = tmp_path / "megatron" / "fltest_vendor_ops"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "norms.py").write_text(VENDOR_NORMS)
    (package / "helpers.py").write_text(VENDOR_HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    from megatron.core.optimizer import clip_grads
    from megatron.core.optimizer import optimizer as optimizer_module

    upstream = clip_grads.get_grad_norm_fp32
    # As a fresh import has it (a reload of clip_grads in an earlier test leaves the optimizer
    # module bound to the function of the first load): the alias this test relies on.
    monkeypatch.setattr(optimizer_module, "get_grad_norm_fp32", upstream)
    try:
        fl_patch.register(GRAD_NORM, "megatron.fltest_vendor_ops.norms.get_grad_norm_fp32")
        fl_patch.install()
        norms = importlib.import_module("megatron.fltest_vendor_ops.norms")
        helpers = importlib.import_module("megatron.fltest_vendor_ops.helpers")
        # fl_patch's function running the vendor's code, at the target and at an alias fl_patch rebound
        installed = clip_grads.get_grad_norm_fp32
        assert installed.__code__ is norms.get_grad_norm_fp32.__code__
        assert optimizer_module.get_grad_norm_fp32 is installed
        assert helpers.vendor_norm is norms.get_grad_norm_fp32
        fl_patch.uninstall()
        assert clip_grads.get_grad_norm_fp32 is upstream
        assert optimizer_module.get_grad_norm_fp32 is upstream
        assert helpers.vendor_norm is norms.get_grad_norm_fp32, (
            "uninstall() rebound megatron.fltest_vendor_ops.helpers.vendor_norm, which fl_patch never patched, "
            f"to {helpers.vendor_norm.__module__}.{helpers.vendor_norm.__qualname__}"
        )
        assert helpers.total_norm([torch.ones(2)]) == "vendor norm"
    finally:
        for name in [n for n in sys.modules if n.startswith("megatron.fltest_vendor_ops")]:
            del sys.modules[name]


RELOAD_PROGRAM = f"""
import importlib, json, sys
import megatron.core
module = sys.modules[{PAGED_STASH!r}]
spec = module.__spec__
before = {{"name": module.__name__, "spec_name": spec.name, "spec_origin": spec.origin,
    "loader": type(spec.loader).__name__, "file": module.__file__}}
try:
    importlib.reload(module)
    error = None
except BaseException as exc:  # report what happened, whatever it is
    error = f"{{type(exc).__name__}}: {{exc}}"
after = {{"name": module.__name__, "spec_name": getattr(module.__spec__, "name", None), "file": module.__file__,
    "still_served": sys.modules.get({PAGED_STASH!r}) is module,
    "kernel": type(getattr(module, "paged_stash_copy_kernel", None)).__name__}}
print("RESULT" + json.dumps({{"before": before, "error": error, "after": after}}))
"""


@pytest.fixture(scope="module")
def reload_run() -> dict[str, Any]:
    """One fresh interpreter: the CPU pack replaces megatron's triton-only paged_stash module whole."""
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", "-c", RELOAD_PROGRAM],
        env=clean_env(FL_PATCH_PACKS="cpu", FL_PATCH_ENTRY_POINTS="0", FL_PATCH_FLAGSCALE="0"),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert len(lines) == 1, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads(lines[0][len("RESULT") :])


def test_a_whole_module_replacement_keeps_its_own_spec(reload_run: dict[str, Any]) -> None:
    """Bullet: the replacement's __spec__ is rewritten.

    sys.modules["megatron.core.transformer.moe.ops.paged_stash"] is the CPU pack's module
    fl_patch.impls.cpu.paged_stash_ops. Today the import system overwrites that module's
    own __spec__ with fl_patch's substitute spec (name and origin of the upstream module,
    fl_patch's SubstituteLoader). Expected: the plugin module's __spec__ is still its own.
    """
    before = reload_run["before"]
    assert before["name"] == PAGED_STASH_IMPL
    assert before["spec_name"] == PAGED_STASH_IMPL, before
    assert before["loader"] != "SubstituteLoader", before
    assert before["spec_origin"] == before["file"], before


def test_reload_of_a_whole_module_replacement_never_runs_upstream_code_into_it(reload_run: dict[str, Any]) -> None:
    """Bullet: reload of a whole-module replacement runs upstream code into the plugin module.

    ``importlib.reload`` of the replaced paged_stash module today runs upstream's
    paged_stash.py in the CPU pack's module (ModuleNotFoundError: triton, halfway through,
    and the module renamed to the upstream name). Expected: the reload succeeds and leaves
    the plugin's module the plugin's (name, file, still served under the upstream name).
    """
    assert reload_run["error"] is None, reload_run
    after = reload_run["after"]
    assert after["name"] == PAGED_STASH_IMPL, after
    assert after["spec_name"] == PAGED_STASH_IMPL, after
    assert after["file"] == reload_run["before"]["file"], after
    assert after["still_served"], after
    assert after["kernel"] == "_UnavailableKernel", after  # the stand-in's kernel, not upstream's triton one


def test_purge_and_reimport_lets_the_old_modules_be_freed(megatron_core, engine) -> None:
    """Bullet: purge+re-import keeps every old module alive.

    ``del sys.modules["megatron.core.transformer.utils"]`` and re-import, three times,
    with attention_mask_func patched. Each new module body is patched; today the engine
    keeps a record per module object ever patched, so every old module stays alive.
    Expected: after gc, weak references to the purged modules are dead; the newest module
    is patched; uninstall() still restores it.
    """
    import fltest_plugin.impls as impls

    name = "megatron.core.transformer.utils"
    fl_patch.register(f"{name}.attention_mask_func", impls.attention_mask_func)
    fl_patch.install()
    with fresh_modules([name]):
        refs = []
        for _ in range(3):
            module = importlib.import_module(name)
            assert module.attention_mask_func.__code__ is impls.attention_mask_func.__code__
            refs.append(weakref.ref(module))
            del module
            del sys.modules[name]
        newest = importlib.import_module(name)
        assert newest.attention_mask_func.__code__ is impls.attention_mask_func.__code__
        gc.collect()
        alive = sum(ref() is not None for ref in refs)
        assert alive == 0, f"{alive} of 3 purged megatron.core.transformer.utils modules are still alive"
        fl_patch.uninstall()
        assert newest.attention_mask_func.__module__ == name
