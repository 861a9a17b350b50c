"""Hostile import machinery: other finders ahead of fl_patch, pytest's rewriting, legacy loaders, aliases.

From the issue "What real programs do to an import hook". A program may put another
import hook at ``sys.meta_path[0]`` (typeguard's and beartype's ``install_import_hook``,
pytest's assertion rewriting), restore ``sys.meta_path`` wholesale (a test fixture),
serve modules through a loader that only has the legacy ``load_module``, or register a
module under a second name in ``sys.modules``. None of these may drop a patch
silently: the patch still applies, or a ``FlPatchWarning`` names the module that
loaded unpatched (at the latest when the process exits).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env

MLA_MODULE = "megatron.core.fusions.fused_mla_yarn_rope_apply"
MLA_ROPE_Q = f"{MLA_MODULE}.fused_apply_mla_rope_for_q"


def run(args: list[str], env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, cwd=str(cwd), capture_output=True, text=True, timeout=300)


def result(proc: subprocess.CompletedProcess[str]) -> dict:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert len(lines) == 1, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads(lines[0][len("RESULT") :])


def warned_about(stderr: str, name: str) -> bool:
    return any("FlPatchWarning" in line and name in line for line in stderr.splitlines())


def assert_patched(out: dict, proc: subprocess.CompletedProcess[str], module: str) -> None:
    """Patched: the engine catches up with a module that loaded past its hook (engine/catch_up.py)."""
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert out["patched"], f"{module} loaded unpatched: {out}\n{proc.stderr[-3000:]}"


def megatron_env(**variables: str) -> dict[str, str]:
    return clean_env(FL_PATCH_PACKS="cpu", FL_PATCH_ENTRY_POINTS="0", FL_PATCH_FLAGSCALE="0", **variables)


def test_a_finder_inserted_at_meta_path_0_does_not_drop_a_patch_silently() -> None:
    """Bullet: another import hook ahead of fl_patch (typeguard/beartype-style finder at sys.meta_path[0]).

    After megatron.core is imported under fl_patch, the program installs a typeguard-style
    hook for megatron.core.fusions at sys.meta_path[0] and imports fused_mla_yarn_rope_apply
    (which megatron.core does not import). Today the patch is silently lost (status
    'waiting'). Expected: the patch applies, or a FlPatchWarning names the module.
    """
    code = f"""
import json, sys
import megatron.core
import fl_patch
from hostile.instrumenting_finder import INSTRUMENTED, install_import_hook
install_import_hook(["megatron.core.fusions"])
import megatron.core.fusions.fused_mla_yarn_rope_apply as m
import hostile.impls as impls
status = {{r.target: r.status.value for r in fl_patch.report()}}
print("RESULT" + json.dumps({{"patched": m.fused_apply_mla_rope_for_q.__code__ is impls.fused_apply_mla_rope_for_q.__code__,
    "instrumented": INSTRUMENTED, "status": status[{MLA_ROPE_Q!r}]}}))
"""
    proc = run(["-m", "fl_patch", "--registry", "hostile.registry_mla_ok", "-c", code], megatron_env())
    out = result(proc)
    assert out["instrumented"] == [MLA_MODULE]  # the other hook really loaded it
    assert_patched(out, proc, MLA_MODULE)


def test_a_finder_inserted_before_the_first_megatron_import_does_not_bypass_activation() -> None:
    """Bullet: another import hook ahead of fl_patch, before fl_patch has installed.

    Under ``python -m fl_patch`` fl_patch is armed and installs at the first megatron
    import. A program whose first lines are ``install_import_hook(["megatron"])``
    (typeguard's usage) puts a finder ahead that answers every megatron import itself:
    fl_patch never installs, and here (no triton) megatron.core fails to import without
    the CPU pack's stand-in; on a GPU machine it would run unpatched with no word.
    Expected: fl_patch installs and the stand-in is served (the job runs), or a
    FlPatchWarning names megatron.
    """
    code = f"""
import json, sys
from hostile.instrumenting_finder import INSTRUMENTED, install_import_hook
install_import_hook(["megatron"])
import megatron.core
import fl_patch
stub = sys.modules[{"megatron.core.transformer.moe.ops.paged_stash"!r}].__name__
print("RESULT" + json.dumps({{"patched": fl_patch.is_installed() and stub == "fl_patch.impls.cpu.paged_stash_ops",
    "instrumented": len(INSTRUMENTED) > 0}}))
"""
    proc = run(["-m", "fl_patch", "-c", code], megatron_env())
    if proc.returncode == 0:
        out = result(proc)
        assert out["instrumented"]
        assert_patched(out, proc, "megatron")
    else:
        assert warned_about(proc.stderr, "megatron"), (
            f"fl_patch never activated and nothing said so (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )


def test_a_fixture_restoring_sys_meta_path_does_not_drop_a_patch_silently() -> None:
    """Bullet: a fixture restoring sys.meta_path[:] (saved before install()) takes fl_patch's finder out.

    fl_patch still says it is installed, and the next watched module loads unpatched with
    no word. Expected: the patch applies (fl_patch re-asserts its finder, or patches
    anyway), or a FlPatchWarning names the module that loaded unpatched.
    """
    code = f"""
import json, sys
saved = sys.meta_path[:]                       # a fixture's setup
import fl_patch
fl_patch.register({MLA_ROPE_Q!r}, "hostile.impls.fused_apply_mla_rope_for_q")
fl_patch.install()
import megatron.core
sys.meta_path[:] = saved                       # the fixture's teardown
import megatron.core.fusions.fused_mla_yarn_rope_apply as m
import hostile.impls as impls
print("RESULT" + json.dumps({{"patched": m.fused_apply_mla_rope_for_q.__code__ is impls.fused_apply_mla_rope_for_q.__code__,
    "installed": fl_patch.is_installed()}}))
"""
    proc = run(["-c", code], megatron_env())
    out = result(proc)
    assert_patched(out, proc, MLA_MODULE)


CONFTEST = """
import pytest

pytest.register_assert_rewrite("hostile.rw_target")
"""

TESTS = """
import hostile.rw_target as rewritten
import hostile.target as plain


def test_control_module_is_patched():
    assert plain.f() == "patched"


def test_rewritten_module_is_patched():
    assert rewritten.f() == "patched"
"""


def test_pytest_assertion_rewriting_does_not_drop_a_patch_silently(tmp_path: Path) -> None:
    """Bullet: pytest assert rewriting ahead of fl_patch.

    ``python -m fl_patch --registry hostile.rw_registry -m pytest``: pytest puts its
    AssertionRewritingHook at sys.meta_path[0] after fl_patch installed, and loads
    hostile.rw_target (``pytest.register_assert_rewrite``) itself. Today that target is
    silently unpatched while the control module is patched. Expected: both inner tests
    pass, or a FlPatchWarning names hostile.rw_target.
    """
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(TESTS)
    env = clean_env(FL_PATCH_PACKS="none", FL_PATCH_ENTRY_POINTS="0", FL_PATCH_FLAGSCALE="0")
    args = ["-m", "fl_patch", "--registry", "hostile.rw_registry", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    proc = run([*args, "-rA", "-W", "always::UserWarning", "test_inner.py"], env, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert "PASSED test_inner.py::test_control_module_is_patched" in output, output[-4000:]
    assert "PASSED test_inner.py::test_rewritten_module_is_patched" in output and proc.returncode == 0, output[-4000:]


def test_a_legacy_load_module_loader_is_patched_or_warned(run_python) -> None:
    """Bullet: legacy load_module loaders skipped silently.

    A finder behind fl_patch serves hostile_legacy_mod through a loader with only
    load_module (no exec_module). Today fl_patch hands its spec back untouched and the
    patch is lost with no word (status 'waiting'). Expected: the patch applies, or a
    FlPatchWarning names hostile_legacy_mod.
    """
    code = """
import json, sys, warnings
import fl_patch
from hostile.legacy_finder import LegacyFinder
fl_patch.register("hostile_legacy_mod.f", "hostile.impls.patched")
fl_patch.install()
sys.meta_path.insert(1, LegacyFinder())
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ImportWarning)  # Python's own note about load_module
    import hostile_legacy_mod as m
(record,) = fl_patch.report()
print("RESULT" + json.dumps({"patched": m.f() == "patched", "status": record.status.value}))
"""
    proc = run_python("-c", code, env=clean_env(FL_PATCH_PACKS="none"), check=False)
    out = result(proc)
    assert_patched(out, proc, "hostile_legacy_mod")


@pytest.mark.parametrize("when", ["installed_first", "imported_first"])
def test_a_module_registered_under_another_name_is_patched_or_warned(when: str, run_python) -> None:
    """Bullet: modules registered under another name in sys.modules never applied, no warning.

    hostile.alias_pkg does what megatron-core's nvshmem_copy_service/compat.py does for
    cuda-core: ``sys.modules[<pkg>.experimental] = import_module(<pkg>._new)``. A target
    named through the alias (hostile.alias_pkg.experimental.get_device) is never applied
    and nothing is said, whether fl_patch is installed before or after the import.
    Expected: the module object under that name is patched, or a FlPatchWarning names
    the target.
    """
    target = "hostile.alias_pkg.experimental.get_device"
    register = f"fl_patch.register({target!r}, 'hostile.impls.patched')\nfl_patch.install()\n"
    imports = "import hostile.alias_pkg\nimport hostile.alias_pkg.experimental as e\n"
    body = register + imports if when == "installed_first" else imports + register
    code = f"""
import json, sys
import fl_patch
{body}
(record,) = fl_patch.report()
print("RESULT" + json.dumps({{"patched": e.get_device() == "patched",
    "same_object": e is sys.modules["hostile.alias_pkg._new"], "status": record.status.value}}))
"""
    proc = run_python("-c", code, env=clean_env(FL_PATCH_PACKS="none"), check=False)
    out = result(proc)
    assert out["same_object"]
    assert_patched(out, proc, target)
