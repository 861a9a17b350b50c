"""The CPU pack's CUDA-on-CPU transfer: unmodified CUDA code around megatron runs on this CPU.

Every run is a real process under ``python -m fl_patch`` (or torchrun under it) with real
torch, real ``torch.distributed`` (gloo) and the real megatron-core. The CUDA-style script
(``tests/support/cuda_on_cpu/cuda_train.py --device cuda``: ``set_device``, ``nccl``,
``.cuda()``, ``device="cuda"``, DDP ``device_ids``, pinned memory, side streams, events,
``synchronize``, the CUDA RNG, autocast, the grad scaler) is compared, loss for loss, with
the same computation written for the CPU (``--device cpu``) run with the transfer off: the
transfer maps devices and backends, it must not change one number.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from ..conftest import REPO, SUPPORT, clean_env
from ..support.ports import free_port

SCRIPT = SUPPORT / "cuda_on_cpu" / "cuda_train.py"
PROBE = SUPPORT / "cuda_on_cpu" / "probe_install.py"
MEGATRON_FIXES = SUPPORT / "cuda_on_cpu" / "megatron_fixes.py"
ANNOUNCEMENT = "fl_patch CPU pack: no GPU here; CUDA calls run on the CPU"
OFF = {"FL_PATCH_CUDA_ON_CPU": "0"}


def _one_rank(**extra: str) -> dict[str, str]:
    return clean_env(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), **extra
    )


def _run(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fl_patch", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def _train(tmp_path: Path, name: str, device: str, *, ranks: int, env: dict[str, str]) -> tuple[list[dict], str]:
    out = tmp_path / f"{name}.jsonl"
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] if ranks > 1 else []
    proc = _run([*launcher, str(SCRIPT), "--device", device, "--out", str(out)], env)
    assert proc.returncode == 0, proc.stderr[-6000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return sorted(records, key=lambda r: (r["rank"], r["step"])), proc.stderr


def _losses(records: list[dict]) -> list[tuple[int, int, float]]:
    return [(r["rank"], r["step"], r["loss"]) for r in records]


def test_cuda_script_on_one_rank_computes_what_the_cpu_version_computes(tmp_path: Path) -> None:
    cuda, cuda_err = _train(tmp_path, "cuda", "cuda", ranks=1, env=_one_rank())
    cpu, cpu_err = _train(tmp_path, "cpu", "cpu", ranks=1, env=_one_rank(**OFF))
    assert len(cuda) == 6
    assert _losses(cuda) == _losses(cpu)  # bit for bit: the same operations on the same CPU
    assert cuda[0]["loss"] != cuda[-1]["loss"]  # it trained
    for record in cuda:
        assert record["param_device"] == "cpu"
        assert record["replayed_same_mask"]  # torch.cuda.set_rng_state really restored the generator
        assert record["elapsed_ms_nonnegative"]
        assert record["peak_memory"] == 0  # torch's own answer on a CPU build: no device memory
        assert record["scale"] == 65536.0  # GradScaler("cuda") is a working (CPU) scaler, not disabled
    # Said once, and only where the transfer is on.
    assert cuda_err.count(ANNOUNCEMENT) == 1, cuda_err[-3000:]
    (said,) = [line for line in cuda_err.splitlines() if ANNOUNCEMENT in line]
    assert said.endswith("(FL_PATCH_CUDA_ON_CPU=0 turns it off)") and len(said) <= 100, said  # one short line
    assert ANNOUNCEMENT not in cpu_err


def test_cuda_script_under_torchrun_two_ranks_computes_what_the_cpu_version_computes(tmp_path: Path) -> None:
    cuda, cuda_err = _train(tmp_path, "cuda2", "cuda", ranks=2, env=clean_env())
    cpu, _ = _train(tmp_path, "cpu2", "cpu", ranks=2, env=clean_env(**OFF))
    assert {r["rank"] for r in cuda} == {0, 1} and len(cuda) == 12
    assert _losses(cuda) == _losses(cpu)
    # DDP all-reduced the gradients and the loss over gloo: both ranks report the same mean.
    by_step = {}
    for _rank, step, loss in _losses(cuda):
        by_step.setdefault(step, set()).add(loss)
    assert all(len(losses) == 1 for losses in by_step.values()), by_step
    assert cuda_err.count(ANNOUNCEMENT) == 1  # rank 0 says it; rank 1 does not repeat it


def test_the_switch_turns_the_transfer_off(tmp_path: Path) -> None:
    proc = _run([str(SCRIPT), "--device", "cuda", "--out", str(tmp_path / "off.jsonl")], _one_rank(**OFF))
    assert proc.returncode != 0
    # Upstream torch again: the script's first CUDA line fails (here: device_count() is 0).
    assert "cuda_train.py" in proc.stderr and "torch.cuda.set_device(" in proc.stderr, proc.stderr[-3000:]
    assert "ZeroDivisionError" in proc.stderr, proc.stderr[-3000:]
    assert ANNOUNCEMENT not in proc.stderr
    assert not (tmp_path / "off.jsonl").exists()


def test_install_redirects_and_uninstall_puts_every_original_back() -> None:
    """In one process: the transfer applied (aliases bound before it included), then uninstall() exact. Not called
    before megatron, set_device's stand-in gives way: the packs load and the transfer patches torch's own set_device,
    not the stand-in; uninstall() then leaves torch's own (nothing of fl_patch behind)."""
    proc = _run([str(PROBE)], _one_rank(LOCAL_WORLD_SIZE="2"))
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["during"] == {
        "is_available": False,
        "device_count": 2,  # one per local rank, as the launcher's LOCAL_WORLD_SIZE says
        "current_device_after_set_device_1": 1,
        "set_device_beyond_count_raises": True,
        "zeros": "cpu",
        "generator": "cpu",
        "generator_is_a_generator": True,
        "to_cuda": "cpu",
        "pinned_empty": "cpu",
        "pinned_tensor_to_cuda": "cpu",
        "pinned_new_empty": "cpu",
        "to_ordinal": "cpu",
        "new_zeros": "cpu",
        "module_to": "cpu",
        "device_context": "cpu",
        "alias_bound_before_install_rebound": True,
        "stream_is_the_stand_in": True,
        "event_is_the_stand_in": True,
        "cuda_seed_seeds_the_cpu_generator": True,
        "autocast_dtype": "torch.float16",
        "backend": "gloo",
        "mesh_device": "cpu",
        "memory_allocated": 0,
        "capability_raises": True,
        "problems": [],
    }
    assert result["restored"] == [], result["restored"]  # every original object is back
    assert result["after"] == {
        "zeros_raises": True,
        "generator_raises": True,
        "pinned_empty_raises": True,
        "set_device_raises": True,
        "is_available": False,
        "set_device_was_a_stand_in": True,
        "set_device_transferred": True,
        "set_device_is_torchs": True,
    }


def test_megatron_without_te_and_flash_attn_with_and_without_the_patches() -> None:
    """TE layer specs build TE's module tree (the local model's weights and loss), the FP8 NameError and flash_attn
    import are fixed,
    compile_helpers does not exit; with the patches disabled, upstream fails at each."""
    on = _run([str(MEGATRON_FIXES), "patched"], _one_rank())
    assert on.returncode == 0, on.stderr[-6000:]
    result = json.loads(on.stdout.strip().splitlines()[-1])
    assert result == {
        "te_spec_is_te_module_tree": True,
        "same_weights": True,
        "same_loss": True,
        "te_only_option_refused": True,
        "recompute_without_te": True,
        "fa_min_version": False,
        "compile_helpers_returned": True,
    }
    targets = [
        "megatron.core.models.gpt.gpt_layer_specs.get_gpt_layer_with_transformer_engine_submodules",
        "megatron.core.models.gpt.gpt_layer_specs.TESpecProvider",
        "megatron.core.tensor_parallel.random.CheckpointWithoutOutput.__init__",
        "megatron.core.utils.get_fa_version",
        "megatron.core.datasets.utils.compile_helpers",
    ]
    off = _run([str(MEGATRON_FIXES), "upstream"], _one_rank(FL_PATCH_DISABLE=",".join(targets)))
    assert off.returncode == 0, off.stderr[-6000:]
    assert json.loads(off.stdout.strip().splitlines()[-1]) == {
        "te_spec": "TypeError: 'NoneType' object is not callable",
        "recompute": "NameError: name 'FP8GlobalStateManager' is not defined",
        "fa_min_version": "ModuleNotFoundError: No module named 'flash_attn'",
        "compile_helpers": "SystemExit: 1",
    }


def test_registry_lists_what_the_impl_module_offers() -> None:
    """The registry's factory list (kept there so that registering imports no torch) is the impl module's."""
    import torch

    from fl_patch.impls.cpu import cuda_names
    from fl_patch.impls.cuda_on_cpu import registry as cuda_on_cpu_registry
    from fl_patch.impls.cuda_on_cpu import transfer

    # one list, kept apart from torch so that registering imports no torch
    assert transfer.FACTORIES is cuda_names.FACTORY_NAMES
    assert all(callable(getattr(torch, name, None)) for name in cuda_names.FACTORY_NAMES)
    for target, impl, _doc in cuda_on_cpu_registry.TORCH_TARGETS + cuda_on_cpu_registry.MEGATRON_TARGETS:
        module, _, name = impl.rpartition(".")
        assert hasattr(sys.modules.get(module) or __import__(module, fromlist=[name]), name), (target, impl)
    assert cuda_on_cpu_registry.transfer_enabled({})
    assert not cuda_on_cpu_registry.transfer_enabled({"FL_PATCH_CUDA_ON_CPU": "0"})
    assert not cuda_on_cpu_registry.transfer_enabled({"FL_PATCH_CUDA_ON_CPU": "off"})
    assert cuda_on_cpu_registry.transfer_enabled({"FL_PATCH_CUDA_ON_CPU": "1"})
    # A pack of its own: FL_PATCH_PACKS=cpu leaves it out.
    from fl_patch.impls import PACKS

    assert PACKS["cuda_on_cpu"] == "fl_patch.impls.cuda_on_cpu.registry:register_pack"


HYBRID_OFFLOAD = REPO / "tests" / "support" / "cuda_on_cpu" / "hybrid_offload.py"
HYBRID_TARGET = (
    "megatron.core.optimizer.cpu_offloading.hybrid_optimizer.HybridDeviceOptimizer._get_sub_optimizer_param_groups"
)


def test_optimizer_cpu_offload_steps_as_adam_on_host_parameters() -> None:
    """``--optimizer-cpu-offload`` (megatron's HybridDeviceOptimizer) with the model on "cuda", i.e. the host: half
    the parameters offloaded, half stepped in place, three steps equal torch's Adam (fp32 exactly up to rounding,
    bf16 with fp32 masters within bf16's step); without the CPU pack's patch upstream cannot step (KeyError)."""
    proc = _run([str(HYBRID_OFFLOAD)], _one_rank())
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, tolerance in (("fp32", 1e-6), ("bf16", 2e-2)):
        run = result[name]
        assert "error" not in run, run
        assert run["offloaded"] > 0 and run["in_place"] > 0 and run["copies_distinct"], run
        assert run["least_change"] > 0 and run["max_difference"] <= tolerance, (name, run)
    proc = _run([str(HYBRID_OFFLOAD)], _one_rank(FL_PATCH_DISABLE=HYBRID_TARGET))
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["fp32"]["error"].startswith("KeyError: Parameter containing"), result


def _context_stand_ins() -> dict[str, object]:
    """Every context manager the CPU stand-ins hand out: each public class of the transfer's ``torch.cuda`` impls and
    of a megatron module's CPU view of ``torch.cuda`` that is a context manager, and each function there whose
    return annotation is one, called with a stream (nothing else is called: no side effects)."""
    import typing

    from fl_patch.impls.cpu import cuda_stand_ins, torch_view
    from fl_patch.impls.cuda_on_cpu import transfer as cuda_on_cpu

    def is_context(kind: object) -> bool:  # a stand-in's own context class (torch.device is torch's own, re-enterable)
        own = isinstance(kind, type) and not kind.__module__.startswith("torch")
        return own and hasattr(kind, "__enter__") and hasattr(kind, "__exit__")

    view = torch_view.CpuTorchView().cuda
    stream = cuda_stand_ins.Stream()
    found: dict[str, object] = {}
    for where, holder in (("cuda_on_cpu", cuda_on_cpu), ("torch view", view), ("cuda_stand_ins", cuda_stand_ins)):
        for name in sorted(set(dir(holder)) | set(dir(type(holder)))):  # (a module's dir() omits its class's methods)
            member = getattr(holder, name, None)
            if name.startswith("_") or not callable(member):
                continue
            if is_context(member):
                found[f"{where}.{name}"] = member(stream) if member is not cuda_stand_ins.Stream else member()
                continue
            if getattr(getattr(member, "__code__", None), "co_filename", "").endswith("contextlib.py"):
                found[f"{where}.{name}"] = member(stream)  # a @contextmanager: one use per object (fails below)
                continue
            try:
                returns = typing.get_type_hints(member).get("return")
            except Exception:  # noqa: BLE001  (no readable annotations: not a stand-in of this kind)
                continue
            if is_context(returns):
                found[f"{where}.{name}"] = member(stream)
    return found


def test_every_context_stand_in_can_be_entered_again_and_nested() -> None:
    """torch's stream and device contexts are classes: one object can be entered again (megatron's
    ``start_grad_sync`` enters one ``torch.cuda.stream(...)`` twice) and nested. Each stand-in must too."""
    contexts = _context_stand_ins()
    assert {"cuda_on_cpu.stream", "cuda_on_cpu.Device", "torch view.stream", "cuda_stand_ins.Stream"} <= set(
        contexts
    ), sorted(contexts)
    # torch.cuda.nvtx.range is itself a @contextmanager (one use per object): its stand-in may be one too
    assert torch.cuda.nvtx.range.__code__.co_filename.endswith("contextlib.py")
    contexts.pop("cuda_stand_ins.nvtx_range")
    for context in contexts.values():
        for _ in range(2):
            with context:  # type: ignore[attr-defined]
                with context:  # type: ignore[attr-defined]
                    pass


# A CUDA script in the usual order: set_device(local_rank) and a CUDA tensor first, megatron after.
SET_DEVICE_FIRST = """
import os, sys, torch
local_rank = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(local_rank)
x = torch.ones(2, device="cuda")
from megatron.core import parallel_state  # noqa: E402
# one write of the whole line: torchrun's two workers share the pipe, and print's pieces could interleave
sys.stdout.write(f"RANK-OK {local_rank} {torch.cuda.current_device()} {x.device.type}\\n")
sys.stdout.flush()
"""


def test_set_device_before_megatron_reaches_the_transfer(tmp_path: Path) -> None:
    """activation/cuda_use.py: the first torch.cuda.set_device, before any megatron import, loads the transfer."""
    script = tmp_path / "train.py"
    script.write_text(SET_DEVICE_FIRST)
    plain = subprocess.run([sys.executable, str(script)], env=_one_rank(), capture_output=True, text=True, timeout=240)
    assert plain.returncode != 0 and "_cuda_setDevice" in plain.stderr  # what the issue saw, without fl_patch
    one = _run([str(script)], _one_rank())
    assert one.returncode == 0, one.stderr[-3000:]
    assert "RANK-OK 0 0 cpu" in one.stdout and one.stderr.count(ANNOUNCEMENT) == 1
    # torchrun's workers, each with its local rank as its device; rank 0 says it once.
    two = _run(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script)], clean_env())
    assert two.returncode == 0, two.stderr[-3000:]
    assert sorted(line for line in two.stdout.splitlines() if line.startswith("RANK-OK")) == [
        "RANK-OK 0 0 cpu",
        "RANK-OK 1 1 cpu",
    ]
    assert two.stderr.count(ANNOUNCEMENT) == 1
    # Switched off, or its pack left out: torch as it is, so the line fails as without fl_patch.
    for env in (_one_rank(**OFF), _one_rank(FL_PATCH_PACKS="cpu")):
        off = _run([str(script)], env)
        assert off.returncode != 0 and "_cuda_setDevice" in off.stderr and ANNOUNCEMENT not in off.stderr


def test_another_first_cuda_use_before_megatron_says_what_to_set(tmp_path: Path) -> None:
    """A first CUDA use other than set_device (here a tensor made on "cuda") cannot be transferred mid-call: torch's
    error comes with what to set, and with that setting the same script runs on the CPU."""
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.ones(2, device='cuda')\nprint('MADE', x.device.type)\n")
    proc = _run([str(script)], _one_rank())
    assert proc.returncode != 0 and "Torch not compiled with CUDA enabled" in proc.stderr
    assert "set FL_PATCH_TRIGGERS=torch" in proc.stderr, proc.stderr[-2000:]
    fixed = _run([str(script)], _one_rank(FL_PATCH_TRIGGERS="torch"))
    assert fixed.returncode == 0 and "MADE cpu" in fixed.stdout, fixed.stderr[-2000:]
