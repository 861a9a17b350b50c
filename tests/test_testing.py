"""fl_patch.testing, the helper a plugin's own tests use: on a small plugin, and on real megatron-core.

The megatron case runs the example plugin's own test file (examples/my_plugin/tests) with
pytest, as its author would: four patterns (wrap, replace, the WrappedTorchNorm factory, a
@copy_signature method) applied in a fresh patched interpreter and called there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fl_patch.testing import check_registry

from .conftest import REPO, clean_env, support_pythonpath

PLUGIN = REPO / "examples" / "my_plugin"


def _plugin(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "tiny_plugin").mkdir()
    (tmp_path / "tiny_plugin" / "__init__.py").write_text("")
    (tmp_path / "tiny_plugin" / "registry.py").write_text(
        "from fl_patch import register\n"
        "register('act_target.mod.greet', 'tiny_plugin.impls.greet')\n"
        "register('act_target.mod.Greeter.goodbye', 'tiny_plugin.impls.greet')\n"  # no such method upstream
        "register('act_target.mod.farewell', 'tiny_plugin.impls.farewell', vendor='musa')\n"  # not chosen here
    )
    (tmp_path / "tiny_plugin" / "impls.py").write_text(
        "import fl_patch\n"
        "def greet(name, punctuation='!'):\n"
        "    return 'tiny ' + fl_patch.original('act_target.mod.greet')(name, punctuation)\n"
        "def farewell(name):\n"
        "    return 'musa bye'\n"
    )
    return clean_env(PYTHONPATH=support_pythonpath(tmp_path), FL_PATCH_PACKS="none")


@pytest.mark.slow  # three patched interpreters: ~15 s of CPU
def test_check_registry_says_what_applied_and_why_the_rest_did_not(tmp_path: Path, monkeypatch) -> None:
    for key, value in _plugin(tmp_path).items():
        monkeypatch.setenv(key, value)
    code = "from act_target import mod\nassert mod.greet('x') == 'tiny hello x!', mod.greet('x')\n"
    result = check_registry("tiny_plugin.registry", code=code, strict=False)
    assert result.returncode == 0, result.stderr
    assert result.applied == ["act_target.mod.greet"]
    (failure,) = result.failures()  # farewell's musa impl is not chosen on this machine: not a failure
    assert failure.startswith("act_target.mod.Greeter.goodbye [default]: target missing:"), failure
    with pytest.raises(AssertionError, match=r"Greeter\.goodbye \[default\]: target missing"):
        result.assert_applied()
    with pytest.raises(AssertionError, match=r"act_target\.mod\.farewell: expected to be patched"):
        result.assert_applied(["act_target.mod.farewell"])
    # Strict (the default): the first problem stops the child; the failure carries its message.
    strict = check_registry("tiny_plugin.registry")
    assert strict.returncode != 0 and any("Greeter" in line and "goodbye" in line for line in strict.failures())
    # Code that fails in the patched child fails the check, with the child's traceback.
    broken = check_registry("tiny_plugin.registry", code="raise RuntimeError('the impl is wrong')", strict=False)
    assert any("RuntimeError: the impl is wrong" in line for line in broken.failures())


@pytest.mark.slow
def test_the_example_plugins_own_tests_pass_on_real_megatron() -> None:
    env = clean_env(PYTHONPATH=os.pathsep.join([str(PLUGIN), str(REPO / "src")]))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PLUGIN / "tests")],
        cwd=str(PLUGIN),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout
