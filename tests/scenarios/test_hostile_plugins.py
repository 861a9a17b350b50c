"""Hostile plugins: impls and registries that end the process, strict errors upstream swallows, cycles.

From the issue "What real programs do to an import hook". Each test reproduces one
failure of the engine as it was when the issue was filed and states what must
happen instead. In default mode a plugin problem is exactly one ``FlPatchWarning``
naming the target (or the registry) and the cause, and the job runs upstream code
with its own exit status; in strict mode (``FL_PATCH_STRICT=1``) it is an
``FlPatchError`` and exit status 1.

The programs import real megatron-core 0.19.2 under ``python -m fl_patch`` where
megatron can show the case; ``tests/support/hostile`` holds the broken plugins.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import fl_patch
from fl_patch import FlPatchError, FlPatchWarning, Status

from ..conftest import REPO, clean_env

GRAD_NORM = "megatron.core.optimizer.clip_grads.get_grad_norm_fp32"
DIVIDE = "megatron.core.utils.divide"
MLA_ROPE_Q = "megatron.core.fusions.fused_mla_yarn_rope_apply.fused_apply_mla_rope_for_q"

MEGATRON_PROGRAM = """
import sys
from megatron.core.optimizer import clip_grads
print("PROGRAM-RAN", clip_grads.get_grad_norm_fp32.__module__)
sys.exit(7)
"""

GREET_PROGRAM = """
import sys
from act_target import mod
print("PROGRAM-RAN", mod.greet("x"))
sys.exit(7)
"""


def launch(
    tmp_path: Path, program: str, *options: str, args: tuple[str, ...] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m fl_patch [options] prog.py [args]`` in a fresh interpreter."""
    script = tmp_path / "prog.py"
    script.write_text(program)
    return subprocess.run(
        [sys.executable, "-m", "fl_patch", *options, str(script), *args],
        env=clean_env(FL_PATCH_ENTRY_POINTS="0", FL_PATCH_FLAGSCALE="0", **env),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=300,
    )


def lines_with(text: str, *parts: str) -> list[str]:
    return [line for line in text.splitlines() if all(part in line for part in parts)]


def strict_error_lines(text: str, *parts: str) -> list[str]:
    """Lines of a strict failure that name every part: ``FlPatchError: ...`` (a traceback's last
    line) or a plain ``fl_patch: ...`` message; never a ``FlPatchWarning`` line."""
    return [
        line
        for line in lines_with(text, *parts)
        if "FlPatchError" in line or (line.lstrip().startswith("fl_patch") and "FlPatchWarning" not in line)
    ]


# ---------------------------------------------------------------- SystemExit in an impl


def test_impl_module_calling_sys_exit_is_one_warning_and_the_job_runs(tmp_path: Path) -> None:
    """Bullet: an impl module raising SystemExit (sys.exit at import) ends the job (exit 0, silently).

    Expected: the job keeps running upstream's get_grad_norm_fp32 and exits with its own
    status (7); stderr has exactly one FlPatchWarning naming the target and 'SystemExit'.
    """
    proc = launch(tmp_path, MEGATRON_PROGRAM, "--registry", "hostile.registry_impl_exits", FL_PATCH_PACKS="cpu")
    assert "PROGRAM-RAN megatron.core.optimizer.clip_grads" in proc.stdout, (
        f"the job ended inside fl_patch (exit {proc.returncode}) before its first line ran\n{proc.stderr[-3000:]}"
    )
    assert proc.returncode == 7, proc.stderr[-3000:]
    warned = lines_with(proc.stderr, "FlPatchWarning", GRAD_NORM)
    assert len(warned) == 1, proc.stderr[-3000:]
    assert "SystemExit" in warned[0]


def test_impl_module_calling_sys_exit_fails_a_strict_run_with_the_message(tmp_path: Path) -> None:
    """Bullet: SystemExit in an impl, strict mode.

    Expected: exit status 1 (not the impl's 0), a one-line strict error (FlPatchError) naming the target
    and 'SystemExit'; the program does not go on unpatched.
    """
    proc = launch(
        tmp_path, MEGATRON_PROGRAM, "--strict", "--registry", "hostile.registry_impl_exits", FL_PATCH_PACKS="cpu"
    )
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    errors = strict_error_lines(proc.stderr, GRAD_NORM)
    assert errors and "SystemExit" in errors[0], proc.stderr[-3000:]
    assert "PROGRAM-RAN" not in proc.stdout


def test_impl_calling_sys_exit_during_late_install_is_one_warning(megatron_core, engine) -> None:
    """Bullet: SystemExit in an impl, when install() patches an already imported module (late).

    Expected: install() returns, upstream divide stays in place, exactly one FlPatchWarning
    naming the target and 'SystemExit', and report() says the impl failed.
    """
    from megatron.core import utils

    upstream = utils.divide
    fl_patch.register(DIVIDE, "hostile.exits_at_import.get_grad_norm_fp32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fl_patch.install()
        except SystemExit as exc:
            pytest.fail(f"SystemExit({exc.code!r}) from an impl module escaped fl_patch.install()")
    messages = [str(w.message) for w in caught if issubclass(w.category, FlPatchWarning)]
    assert len([m for m in messages if DIVIDE in m]) == 1, messages
    assert "SystemExit" in next(m for m in messages if DIVIDE in m)
    assert utils.divide is upstream
    (record,) = fl_patch.report()
    assert record.status is Status.IMPL_FAILED and "SystemExit" in record.detail


def test_keyboard_interrupt_in_an_impl_still_interrupts(tmp_path: Path) -> None:
    """Bullet: catch BaseException *but KeyboardInterrupt*: Ctrl-C while an impl loads must stop the job.

    Expected (and the current behaviour, kept): the program dies with KeyboardInterrupt
    (exit 130 or the traceback), never runs on.
    """
    proc = launch(
        tmp_path,
        GREET_PROGRAM,
        "--registry",
        "hostile.registry_interrupts",
        args=("--steps", "3"),
        FL_PATCH_PACKS="none",
    )
    assert "PROGRAM-RAN" not in proc.stdout
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr


# ---------------------------------------------------------------- SystemExit in a registry


def test_registry_running_argparse_at_import_is_one_warning_and_the_job_runs(tmp_path: Path) -> None:
    """Bullet: a registry module raising SystemExit (argparse at import) ends the job.

    The registry parses the command line at import; argparse rejects the program's own
    ``--steps 3`` with SystemExit(2). Expected: the job runs (upstream greet, the registry
    contributes nothing) with its own exit status 7, and exactly one FlPatchWarning names
    the registry module and 'SystemExit'.
    """
    proc = launch(
        tmp_path, GREET_PROGRAM, "--registry", "hostile.registry_argparse", args=("--steps", "3"), FL_PATCH_PACKS="none"
    )
    assert "PROGRAM-RAN hello x!" in proc.stdout, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 7, proc.stderr[-3000:]
    warned = lines_with(proc.stderr, "FlPatchWarning", "hostile.registry_argparse")
    assert len(warned) == 1, proc.stderr[-3000:]
    assert "SystemExit" in warned[0]


def test_registry_running_argparse_at_import_fails_a_strict_run_with_the_message(tmp_path: Path) -> None:
    """Bullet: SystemExit in a registry module, strict mode.

    Expected: exit status 1 (not argparse's 2), an FlPatchError naming the registry
    module and 'SystemExit'; the program does not run.
    """
    proc = launch(
        tmp_path,
        GREET_PROGRAM,
        "--strict",
        "--registry",
        "hostile.registry_argparse",
        args=("--steps", "3"),
        FL_PATCH_PACKS="none",
    )
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    errors = strict_error_lines(proc.stderr, "hostile.registry_argparse")
    assert errors and "SystemExit" in errors[0], proc.stderr[-3000:]
    assert "PROGRAM-RAN" not in proc.stdout


def test_entry_point_calling_sys_exit_is_one_warning(megatron_core, engine, monkeypatch, tmp_path: Path) -> None:
    """Bullet: a registry module raising SystemExit, when it is an installed ``fl_patch.registries`` entry point.

    Expected: install() returns (megatron is loaded, so entry points load now), exactly
    one FlPatchWarning names the entry point and 'SystemExit', and the entry point
    contributes nothing.
    """
    dist = tmp_path / "hostile_exit_vendor-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile_exit_vendor\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[fl_patch.registries]\nvendor = hostile_ep_exits\n")
    (tmp_path / "hostile_ep_exits.py").write_text(
        "import sys\nfrom fl_patch import register\n"
        f"register({DIVIDE!r}, 'hostile.impls.patched')\n"
        "sys.exit(3)  # a vendor registry that gives up when its SDK finds no device\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setenv("FL_PATCH_ENTRY_POINTS", "1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fl_patch.install()
        except SystemExit as exc:
            pytest.fail(f"SystemExit({exc.code!r}) from an entry point escaped fl_patch.install()")
        finally:
            sys.modules.pop("hostile_ep_exits", None)
    messages = [str(w.message) for w in caught if issubclass(w.category, FlPatchWarning)]
    named = [m for m in messages if "hostile_ep_exits" in m]
    assert len(named) == 1 and "SystemExit" in named[0], messages
    assert [r.target for r in fl_patch.report()] == []


# ---------------------------------------------------------------- strict, swallowed upstream

MLA_PROGRAM = """
import sys
import megatron.core.transformer.multi_latent_attention as mla
# upstream: try: from megatron.core.fusions.fused_mla_yarn_rope_apply import ... except: ... = None
print("PROGRAM-RAN", mla.fused_apply_mla_rope_for_q)
sys.exit(0)
"""


def test_strict_error_swallowed_by_an_upstream_bare_except_still_fails_the_run(tmp_path: Path) -> None:
    """Bullet: strict mode defeated by upstream ``try/except:`` around an import.

    megatron-core's transformer/multi_latent_attention.py imports
    megatron.core.fusions.fused_mla_yarn_rope_apply inside ``try: ... except:``. With a
    broken impl for a target there and FL_PATCH_STRICT=1, the FlPatchError raised in that
    import is swallowed and the job runs to exit 0 unpatched. Expected: the run still
    fails, at the latest at exit, with exit status 1 and stderr naming the target.
    """
    proc = launch(tmp_path, MLA_PROGRAM, "--strict", "--registry", "hostile.registry_mla", FL_PATCH_PACKS="cpu")
    assert proc.returncode == 1, f"strict run exited {proc.returncode}\n{proc.stdout[-1000:]}\n{proc.stderr[-3000:]}"
    assert strict_error_lines(proc.stderr, MLA_ROPE_Q), proc.stderr[-3000:]


# ---------------------------------------------------------------- cycles


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")], ids=["a_first", "b_first"])
def test_a_cycle_of_impls_is_not_reported_applied_as_a_no_op(order: tuple[str, str], run_python) -> None:
    """Bullet: cycles a.f<->b.g reported applied.

    hostile.cycle registers a.f -> "hostile.cycle.b.g" and b.g -> "hostile.cycle.a.f".
    Today both are 'applied' while one of them is its own upstream function again.
    Expected: a record says 'applied' only if the target really changed (it no longer
    returns its own upstream result); a target that is not applied is named by a
    FlPatchWarning.
    """
    code = f"""
import json, fl_patch
fl_patch.install()
from hostile.cycle import {order[0]}, {order[1]}
from hostile.cycle import a, b
status = {{r.target: r.status.value for r in fl_patch.report()}}
print("RESULT" + json.dumps({{"a.f": a.f(), "b.g": b.g(), "status": status}}))
"""
    env = clean_env(FL_PATCH_PACKS="none", FL_PATCH_REGISTRY="hostile.cycle.registry", PYTHONWARNINGS="always")
    proc = run_python("-c", code, env=env)
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    out = json.loads(line[len("RESULT") :])
    for short, target in (("a.f", "hostile.cycle.a.f"), ("b.g", "hostile.cycle.b.g")):
        if out["status"][target] == "applied":
            assert out[short] != f"{short} upstream", (
                f"{target} is reported applied but is still its own upstream function: {out}"
            )
        else:
            assert lines_with(proc.stderr, "FlPatchWarning", target), (out, proc.stderr[-2000:])


def test_a_cycle_of_impls_fails_a_strict_run_or_applies_truthfully(run_python) -> None:
    """Bullet: cycles a.f<->b.g, strict mode.

    Expected: either both targets really change (a swap) or the strict run fails with an
    FlPatchError naming a target of the cycle.
    """
    code = """
import json, fl_patch
fl_patch.install()
from hostile.cycle import a, b
print("RESULT" + json.dumps([a.f(), b.g()]))
"""
    env = clean_env(FL_PATCH_PACKS="none", FL_PATCH_REGISTRY="hostile.cycle.registry", FL_PATCH_STRICT="1")
    proc = run_python("-c", code, env=env, check=False)
    if proc.returncode == 0:
        (line,) = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
        assert json.loads(line[len("RESULT") :]) == ["b.g upstream", "a.f upstream"], proc.stdout
    else:
        assert strict_error_lines(proc.stderr, "hostile.cycle."), proc.stderr[-2000:]


def test_strict_mode_in_process_raises_for_an_impl_calling_sys_exit(megatron_core, engine, monkeypatch) -> None:
    """Bullet: SystemExit in an impl, strict, in-process install().

    Expected: FlPatchError naming the target and 'SystemExit', never a bare SystemExit.
    """
    fl_patch.register(DIVIDE, "hostile.exits_at_import.get_grad_norm_fp32")
    monkeypatch.setenv("FL_PATCH_STRICT", "1")
    try:
        with pytest.raises(FlPatchError) as info:
            fl_patch.install()
    except SystemExit as exc:
        pytest.fail(f"SystemExit({exc.code!r}) from an impl module escaped fl_patch.install() in strict mode")
    assert DIVIDE in str(info.value) and "SystemExit" in str(info.value)
