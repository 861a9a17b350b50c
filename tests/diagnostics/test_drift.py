"""Several megatron-core releases: version gates, GPU-only stand-ins, calls of the original, the drift check.

Against the real megatron-core of .venv (0.19.2) and, for ``--check --against``, real
megatron-core wheels of other releases (fetched once into ``.cache/wheels`` by
``scripts/bootstrap.sh``, or by the check itself). Small synthetic modules only where
megatron cannot show a case (a guarded vs an unguarded ``import triton`` chain).
"""

from __future__ import annotations

import json
import textwrap
import zipfile
from pathlib import Path

import pytest

from fl_patch.core.gates import Gate, package_info_version, parse_gate
from tests.conftest import REPO, clean_env, support_pythonpath

WHEELS = REPO / ".cache" / "wheels"


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


# ------------------------------------------------------------------------------------------ gates
@pytest.mark.parametrize(
    "spec, cause",
    [
        ("megatron-core>=>0.19", "not a version requirement"),
        ("megatron-core", "names no version range"),
        ("megatron-core[dev]>=0.19", "only 'distribution<specifiers>'"),
        ("megatron-core>=0.19; python_version<'3'", "only 'distribution<specifiers>'"),
        ("", "requires must be a requirement string"),
        (3, "requires must be a requirement string"),
    ],
)
def test_a_bad_gate_is_one_error_naming_the_registration(spec: object, cause: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_gate(spec, "megatron.core.utils.foo")
    assert "megatron.core.utils.foo" in str(info.value) and cause in str(info.value)


def test_gate_ranges_prereleases_and_a_source_trees_version(tmp_path: Path) -> None:
    gate = parse_gate("megatron-core>=0.19,<0.21", "t")
    assert isinstance(gate, Gate)
    assert [gate.allows(v) for v in ("0.18.2", "0.19.0", "0.20.0rc0", "0.20.9", "0.21.0")] == [
        False,
        True,
        True,
        True,
        False,
    ]
    assert not gate.allows("not-a-version")
    info = _write(tmp_path, {"package_info.py": "MAJOR = 0\nMINOR = 20\nPATCH = 0\nPRE_RELEASE = 'rc1'\n"})
    assert package_info_version(str(info / "package_info.py")) == "0.20.0rc1"
    assert parse_gate("megatron-core<0.19", "t").describe("0.19.2") == (  # type: ignore[union-attr]
        "not for this version: requires megatron-core<0.19 (megatron-core 0.19.2)"
    )


GATED_REGISTRY = """
    import fl_patch

    T = "megatron.core.parallel_state.get_tensor_model_parallel_world_size"

    def now(*args, **kwargs):
        return 41

    def old(*args, **kwargs):
        return 17

    fl_patch.register(T, "fltest_gated.now", vendor="cpu", requires="megatron-core>=0.19,<0.21")
    fl_patch.register(T, "fltest_gated.old", vendor="default", requires="megatron-core<0.19")
    # Every vendor's registration gated out here: one message, upstream runs.
    fl_patch.register("megatron.core.parallel_state.get_data_parallel_world_size", "fltest_gated.old",
                      vendor="cpu", requires="megatron-core<0.18")
    # The impl passes the original a keyword it has no parameter for (0.17.1's _warmup_jit_function case).
    def forwards_too_much(*args, **kwargs):
        return fl_patch.original(W)(*args, check_initialized=True, **kwargs)
    W = "megatron.core.parallel_state.get_pipeline_model_parallel_world_size"
    fl_patch.register(W, "fltest_gated.forwards_too_much", vendor="cpu")
"""


def test_gates_apply_list_and_check_on_the_installed_release(run_python, tmp_path: Path) -> None:
    _write(tmp_path, {"fltest_gated.py": GATED_REGISTRY})
    env = clean_env(
        PYTHONPATH=support_pythonpath(tmp_path),
        FL_PATCH_REGISTRY="fltest_gated",
        FL_PATCH_PACKS="none",
        MG_FL_PREFER="cpu",
    )
    code = """
        import fl_patch; fl_patch.install()
        from megatron.core import parallel_state as ps
        rows = {(r.target.rsplit('.', 1)[1], r.vendor): (r.status.value, r.detail) for r in fl_patch.report()}
        print(ps.get_tensor_model_parallel_world_size(), rows[("get_tensor_model_parallel_world_size", "default")])
        print(rows[("get_data_parallel_world_size", "cpu")])
    """
    out = run_python("-c", textwrap.dedent(code), env=env).stdout.splitlines()
    assert out[0].startswith(
        "41 ('not for this version', 'not for this version: requires megatron-core<0.19 (megatron-core 0.19.2)')"
    )
    assert out[1].startswith("('not for this version'")

    listing = run_python("-m", "fl_patch", "--list", env={**env, "COLUMNS": "200"}).stdout  # rows unwrapped
    assert "[requires megatron-core>=0.19,<0.21]" in listing and "[requires megatron-core<0.19]" in listing

    proc = run_python("-m", "fl_patch", "--check", "--json", env=env, check=False)
    report = json.loads(proc.stdout)
    levels = {(r["target"].rsplit(".", 1)[1], r["vendor"]): r for r in report["registrations"]}
    assert levels[("get_tensor_model_parallel_world_size", "cpu")]["level"] == "ok"
    assert levels[("get_tensor_model_parallel_world_size", "default")]["level"] == "not for this version"
    # Without the CPU pack, megatron.core's unguarded `import triton` got the stand-in: --check says where
    # (a note about this machine, apart from the messages about registrations).
    assert any(
        m.startswith("triton is not installed (GPU-only)") and "megatron.core.transformer.moe.ops.paged_stash" in m
        for m in report["notes"]
    ), report["notes"]
    gated_out = [m for m in report["messages"] if "get_data_parallel_world_size" in m]
    assert len(gated_out) == 1 and "no registration is for this version" in gated_out[0]
    forwarding = levels[("get_pipeline_model_parallel_world_size", "cpu")]
    assert forwarding["level"] == "error" and proc.returncode == 1
    assert "has no parameter 'check_initialized'" in forwarding["findings"][0]["message"]


# ------------------------------------------------------------------------------------------ GPU-only stand-ins
GPU_MODULES = {
    # A megatron module with triton kernels and an unguarded import (main's ssm/ops, 0.18's paged_stash).
    "megatron/fltest_kernels.py": """
        import triton
        import triton.language as tl
        from packaging import version

        NEW_TRITON = version.parse(triton.__version__) >= version.parse("2.2.0")

        @triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
        @triton.jit
        def _add_kernel(x, n: tl.constexpr):
            pass

        def add(x):
            return _add_kernel[(1,)](x, 1)

        def cpu_path(x):
            return x + 1
    """,
    # A megatron module that guards its import: keeps its fallback even after the one above.
    "megatron/fltest_guarded.py": """
        try:
            import triton
            HAVE_TRITON = True
        except ImportError:
            HAVE_TRITON = False
    """,
    # An unguarded module imported under a guard: the guard up the stack decides.
    "megatron/fltest_chain.py": """
        try:
            import megatron.fltest_kernels2
            HAVE_KERNELS = True
        except ImportError:
            HAVE_KERNELS = False
    """,
    "megatron/fltest_kernels2.py": "import triton\n",
}


def test_unguarded_gpu_only_imports_get_a_stand_in_guarded_ones_keep_their_fallback(run_python, tmp_path: Path) -> None:
    _write(tmp_path, GPU_MODULES)
    code = """
        import importlib.util, sys
        import fl_patch; fl_patch.install()
        import megatron.fltest_kernels as k
        import megatron.fltest_guarded as g
        import megatron.fltest_chain as c
        from fl_patch.host.gpu_only import GpuOnlyPackageMissing, served
        print("cpu_path", k.cpu_path(1), "new_triton", k.NEW_TRITON)
        print("guarded", g.HAVE_TRITON, "chain", c.HAVE_KERNELS)
        print("probe", importlib.util.find_spec("triton"))
        try:
            k.add(1)
        except GpuOnlyPackageMissing as exc:
            print("raised", isinstance(exc, ImportError), exc)
        try:
            import triton
        except ImportError as exc:
            print("outside megatron:", type(exc).__name__)
        print("served", served())
        # Real megatron-core 0.19.2: its unguarded `import triton` module, without the CPU pack's
        # replacement of it, imports through the stand-in.
        import megatron.core.transformer.moe.ops.paged_stash as p
        print("real", type(p.paged_stash_copy_kernel).__name__, served()["triton"][-1])
    """
    env = clean_env(
        PYTHONPATH=support_pythonpath(tmp_path),
        FL_PATCH_PACKS="none",
        FL_PATCH_ENTRY_POINTS="0",
    )
    out = run_python("-c", textwrap.dedent(code), env=env).stdout
    assert "cpu_path 2 new_triton False" in out
    assert "guarded False chain False" in out
    assert "probe None" in out
    assert (
        "raised True fl_patch: triton.autotune(...)(triton.jit(_add_kernel))[...] was called by megatron.fltest_kernels,"
        " but 'triton' is not installed" in out
    )
    assert "outside megatron: ModuleNotFoundError" in out
    assert "served {'triton': ['megatron.fltest_kernels']}" in out
    assert "real _Absent megatron.core.transformer.moe.ops.paged_stash" in out


# ------------------------------------------------------------------------------------------ --check --against
def _wheel(version: str) -> Path:
    found = sorted(WHEELS.glob(f"megatron_core-{version}-*.whl"))
    assert found, f"no megatron-core {version} wheel in {WHEELS}: scripts/bootstrap.sh fetches it"
    return found[0]


OLD_STYLE_REGISTRY = """
    import fl_patch
    # As the packs registered before version gates: 0.19's places, no requires=.
    fl_patch.register("megatron.training.utils.common_utils.get_device_arch_version",
                      "fl_patch.impls.cpu.training_functions.get_device_arch_version", vendor="cpu")
    fl_patch.register("megatron.core.transformer.moe.ops.paged_stash", "fl_patch.impls.cpu.paged_stash_ops", vendor="cpu")
    fl_patch.register("megatron.training.initialize._warmup_jit_function", "fltest_old_style.warmup", vendor="cpu")
    # create=True creates a missing name, not its module: 0.17 has no models.hybrid (0.18 renamed mamba so)
    fl_patch.register("megatron.core.models.hybrid.hybrid_block.TENorm", "fl_patch.impls.te.modules.TENorm",
                      vendor="cpu", create=True)
    fl_patch.register("megatron.core.models.gpt.gpt_layer_specs.NOT_THERE_YET", "fltest_old_style.warmup",
                      vendor="cpu", create=True)
    W = "megatron.training.initialize._warmup_jit_function"
    def warmup(tp_size=None):
        return fl_patch.original(W)(tp_size=tp_size)
"""


def test_check_against_wheels_predicts_moves_and_forwarding(run_python, tmp_path: Path) -> None:
    wheel_017, wheel_018 = _wheel("0.17.1"), _wheel("0.18.2")
    env = clean_env(FL_PATCH_CACHE=str(WHEELS))
    # The shipped packs: clean on 0.17.1 and 0.18.2 (the gates say where each moved target is).
    proc = run_python(
        "-m", "fl_patch", "--check", "--against", "0.17.1", "--against", str(wheel_018), "--json", "--offline", env=env
    )
    document = json.loads(proc.stdout)
    assert document["ok"] and [a["megatron_core"] for a in document["against"]] == ["0.17.1", "0.18.2"]
    v017 = {r["target"]: r for r in document["against"][0]["registrations"] if r["vendor"] == "cpu"}
    assert v017["megatron.core.transformer.moe.ops.paged_stash"]["level"] == "not for this version"
    assert v017["megatron.training.utils.get_device_arch_version"]["level"] == "ok"
    changes = {(c["target"], c["from"], c["to"]) for c in document["diff"]}
    assert ("megatron.training.utils.common_utils.get_device_arch_version", "not for this version", "ok") in changes

    # Registrations as they were before the gates: each break is predicted, with where it went.
    _write(tmp_path, {"fltest_old_style.py": OLD_STYLE_REGISTRY})
    env_old = clean_env(
        PYTHONPATH=support_pythonpath(tmp_path), FL_PATCH_PACKS="none", FL_PATCH_REGISTRY="fltest_old_style"
    )
    proc = run_python("-m", "fl_patch", "--check", "--against", str(wheel_017), "--json", env=env_old, check=False)
    assert proc.returncode == 1
    found = {r["target"]: r for r in json.loads(proc.stdout)["against"][0]["registrations"]}
    moved = found["megatron.training.utils.common_utils.get_device_arch_version"]
    assert moved["level"] == "error" and moved["moved_to"][0] == "megatron.training.utils.get_device_arch_version"
    stash = found["megatron.core.transformer.moe.ops.paged_stash"]
    assert stash["level"] == "error" and "megatron.core.transformer.moe.paged_stash" not in stash["moved_to"]
    hybrid = found["megatron.core.models.hybrid.hybrid_block.TENorm"]
    assert hybrid["level"] == "error" and "has no 'hybrid'" in hybrid["findings"][0], hybrid
    assert found["megatron.core.models.gpt.gpt_layer_specs.NOT_THERE_YET"]["level"] == "warning"  # created there
    warm = found["megatron.training.initialize._warmup_jit_function"]
    assert warm["level"] == "error" and any("has no parameter 'tp_size'" in f for f in warm["findings"])
    # ... and the text form says the same; no megatron module was imported for it.
    code = (
        "import sys; from fl_patch.diagnostics.drift import run; rc = run([sys.argv[1]]);"
        "print('rc', rc, 'megatron imported:', sorted(m for m in sys.modules if m.startswith('megatron')))"
    )
    text = run_python("-c", code, str(wheel_017), env=env_old).stdout
    assert "defined at megatron.training.utils.get_device_arch_version" in text
    assert "rc 1 megatron imported: []" in text


SPELLED_REGISTRY = """
    import fl_patch
    _INIT = "megatron.training.initialize"
    _W = f"{_INIT}._warmup_jit_function"
    _HALF = "megatron.training." + "initialize"
    def literal(tp_size=None):
        return fl_patch.original("megatron.training.initialize._warmup_jit_function")(tp_size=tp_size)
    def constant(tp_size=None):
        return fl_patch.original(_W)(tp_size=tp_size)
    def fstring(tp_size=None):
        return fl_patch.original(f"{_INIT}._warmup_jit_function")(tp_size=tp_size)
    def concatenated(tp_size=None):
        warm = fl_patch.original(_HALF + "._warmup_jit_function")
        return warm(tp_size=tp_size)
    def passes_on(*args, **kwargs):
        return fl_patch.original(f"{_INIT}._warmup_jit_function")(*args, **kwargs)
    for name in ("literal", "constant", "fstring", "concatenated", "passes_on"):
        fl_patch.register(_W, f"fltest_spelled.{name}", vendor=name)
"""


def test_check_against_reads_every_spelling_of_the_target_in_a_call_of_the_original(run_python, tmp_path: Path) -> None:
    """An impl that names its original by a literal, a constant, an f-string or a sum of constants and passes
    it an argument 0.17.1's function does not take is an error against 0.17.1; one that passes on what it
    received is not."""
    _write(tmp_path, {"fltest_spelled.py": SPELLED_REGISTRY})
    env = clean_env(PYTHONPATH=support_pythonpath(tmp_path), FL_PATCH_PACKS="none", FL_PATCH_REGISTRY="fltest_spelled")
    proc = run_python("-m", "fl_patch", "--check", "--against", str(_wheel("0.17.1")), "--json", env=env, check=False)
    found = {r["vendor"]: r for r in json.loads(proc.stdout)["against"][0]["registrations"]}
    for spelling in ("literal", "constant", "fstring", "concatenated"):
        assert found[spelling]["level"] == "error", (spelling, found[spelling])
        assert any("has no parameter 'tp_size'" in f for f in found[spelling]["findings"]), found[spelling]
    assert found["passes_on"]["level"] == "ok", found["passes_on"]
    assert proc.returncode == 1


def test_check_against_bad_input_is_one_clear_message(run_python, tmp_path: Path) -> None:
    not_zip = tmp_path / "megatron_core-9.9-py3-none-any.whl"
    not_zip.write_text("not a zip")
    other_zip = tmp_path / "other-1.0-py3-none-any.whl"
    with zipfile.ZipFile(other_zip, "w") as archive:
        archive.writestr("other/__init__.py", "")
    cases = {
        "not-a-version!": "not a megatron-core version, a wheel or a source tree directory",
        str(tmp_path): "not a megatron source tree (no megatron/core inside)",
        str(not_zip): "not a wheel (not a zip archive)",
        str(other_zip): "not a megatron-core wheel (no megatron/core inside)",
        "0.0.1": "no wheel of megatron-core 0.0.1",
    }
    env = clean_env(FL_PATCH_CACHE=str(tmp_path / "cache"))
    for spec, message in cases.items():
        proc = run_python("-m", "fl_patch", "--check", "--against", spec, "--offline", env=env, check=False)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, (spec, proc.stderr)
