"""Megatron-LM's own unit tests on a CPU, world size 1, with the CUDA-on-CPU transfer off and on.

Runs a chosen subset of ``tests/unit_tests`` of a Megatron-LM checkout (the tag that
matches the installed megatron-core: ``core_v0.19.0`` for 0.19.x) against the installed
megatron-core, activated by fl_patch's sitecustomize (``PYTHONPATH=sitecustomize_template``),
once per mode:

* ``off``: ``FL_PATCH_CUDA_ON_CPU=0``, the CPU pack as it was before the transfer (megatron's
  own modules patched; the tests' own CUDA calls are not);
* ``on``: the transfer on (the default on a machine without a GPU);
* ``none``: ``FL_PATCH=0``, upstream alone (a reference; not run unless asked).

Each test file runs in its own ``pytest`` process (``WORLD_SIZE=1 RANK=0 LOCAL_RANK=0``, a
free ``MASTER_PORT`` each, a per-test time limit through pytest-timeout and a per-file
wall limit), recording each outcome through ``bench/support/mlm_results_plugin.py``. It
prints pass/fail counts per mode and every test that passed with the transfer off (or in
``--baseline``, a JSON from an earlier run) and does not pass with it on, and writes every
outcome to ``--json`` (default ``docs/megatron_unit_tests_cpu.json``).

Megatron-LM's test tree needs a few packages that fl_patch does not (``click`` and
``requests`` for its conftest, ``pytest-mock``, ``mock``, ``pytest-timeout``); they are
installed with ``--install-deps`` into ``.cache/megatron-lm-test-deps`` (kept out of
``.venv``) and put on ``PYTHONPATH`` for the test processes only.

Run::

    git clone --depth 1 --branch core_v0.19.0 https://github.com/NVIDIA/Megatron-LM /tmp/Megatron-LM
    .venv/bin/python bench/megatron_unit_tests.py --megatron-lm /tmp/Megatron-LM --install-deps
    .venv/bin/python bench/megatron_unit_tests.py --megatron-lm /tmp/Megatron-LM --subset tensor_parallel --modes on
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).resolve().parent / "support"
DEPS_DIR = REPO / ".cache" / "megatron-lm-test-deps"
DEPS = (
    "click",
    "requests",
    "charset-normalizer",
    "idna",
    "urllib3",
    "certifi",
    "pytest-mock",
    "mock",
    "pytest-timeout",
    # megatron-core's own "dev" extra (einops~=0.8): parallel_state's hierarchical groups and
    # megatron-fsdp raise "einops is not installed" without it (8 test_grad_sync tests at 2 ranks).
    "einops~=0.8",
    # megatron's datasets compile their C++ helpers at first use (megatron/core/datasets/Makefile runs
    # `python3 -m pybind11 --includes`): without pybind11 the GPT dataset tests exit with "Failed to compile"
    "pybind11",
)
DEP_MODULES = ("click", "requests", "pytest_mock", "mock", "pytest_timeout", "einops", "pybind11")

# The default subset: what megatron-core's training path is made of (parallel state, tensor
# parallelism, the transformer's local-spec layers, GPT, DDP and its buffers, optimizers and
# schedulers, pipeline schedules, fusions, dist_checkpointing's core), plus the small
# top-level files. Paths relative to tests/unit_tests; a directory means its test files.
SUBSETS: dict[str, tuple[str, ...]] = {
    "default": (
        "test_basic.py",
        "test_utils.py",
        "test_parallel_state.py",
        "test_local_multi_tensor_fns.py",
        "test_num_microbatches_calculator.py",
        "test_model_parallel_config.py",
        "test_process_groups_config.py",
        "test_hyper_comm_grid.py",
        "test_optimizer_param_scheduler.py",
        "test_imports.py",
        "test_typed_torch.py",
        "tensor_parallel",
        "fusions",
        "optimizer",
        "pipeline_parallel/test_schedules.py",
        "distributed/test_param_and_grad_buffer.py",
        "distributed/test_finalize_model_grads.py",
        "distributed/test_distributed_data_parallel.py",
        "transformer/test_attention.py",
        "transformer/test_mlp.py",
        "transformer/test_transformer_layer.py",
        "transformer/test_transformer_block.py",
        "transformer/test_core_attention.py",
        "transformer/test_module.py",
        "transformer/test_rope.py",
        "transformer/test_utils.py",
        "transformer/test_transformer_config.py",
        "transformer/test_spec_utils.py",
        "transformer/test_attention_no_rope.py",
        "transformer/test_multi_token_prediction.py",
        "models/test_gpt_model.py",
        "models/test_base_embedding.py",
        "models/test_bert_model.py",
        "models/test_t5_model.py",
        "dist_checkpointing/models/test_gpt_model.py",
        "dist_checkpointing/models/test_mlp_glu.py",
        "dist_checkpointing/test_optimizer.py",
        "dist_checkpointing/test_mapping.py",
        "dist_checkpointing/test_serialization.py",
        "dist_checkpointing/test_torch_dist.py",
        "data/test_builder.py",
        "data/test_gpt_dataset.py",
    ),
    "tensor_parallel": ("tensor_parallel",),
    "smoke": ("test_basic.py", "test_utils.py", "tensor_parallel/test_random.py"),
    # Beyond the default: MoE layers and dispatchers, MLA, spec customisation, dist_checkpointing's other
    # strategies, expert-parallel gradient sync, pipeline layouts, heterogeneous GPT, optimizer CPU offload
    # (what a user bringing MoE/MLA recipes and more ranks meets next; docs/cuda_on_cpu.md, "A wider selection").
    "wider": (
        "transformer/moe/test_a2a_token_dispatcher.py",
        "transformer/moe/test_aux_loss.py",
        "transformer/moe/test_grouped_mlp.py",
        "transformer/moe/test_moe_layer.py",
        "transformer/moe/test_routers.py",
        "transformer/moe/test_sequential_mlp.py",
        "transformer/moe/test_shared_experts.py",
        "transformer/moe/test_token_dispatcher.py",
        "transformer/moe/test_upcycling.py",
        "transformer/moe/test_multihot_indices_converter.py",
        "transformer/test_multi_latent_attention.py",
        "transformer/test_spec_customization.py",
        "transformer/test_relative_attention.py",
        "transformer/test_mup.py",
        "transformer/test_transformer_block_custom_pgs.py",
        "dist_checkpointing/test_fully_parallel.py",
        "dist_checkpointing/test_async_save.py",
        "dist_checkpointing/test_nonpersistent.py",
        "dist_checkpointing/test_strict.py",
        "dist_checkpointing/test_replication.py",
        "dist_checkpointing/test_local.py",
        "dist_checkpointing/test_validation.py",
        "dist_checkpointing/models/test_moe_experts.py",
        "dist_checkpointing/test_pipeline_parallel_layout.py",
        "distributed/test_grad_sync_with_expert_parallel.py",
        "distributed/test_grad_reduce_for_replicated_embedder.py",
        "distributed/test_param_layout.py",
        "distributed/test_reduce_scatter_with_fp32_accumulation.py",
        "pipeline_parallel/test_pipeline_layout.py",
        "pipeline_parallel/test_helpers.py",
        "pipeline_parallel/test_mtp_loss_scale.py",
        "models/test_heterogeneous_gpt_model.py",
        "test_optimizer_cpu_offloading.py",
        "test_num_floating_point_operations.py",
        "test_wrap_model_chunks_with_ddp.py",
    ),
}

MODES: dict[str, dict[str, str]] = {
    "none": {"FL_PATCH": "0"},
    "off": {"FL_PATCH_CUDA_ON_CPU": "0"},
    "on": {"FL_PATCH_CUDA_ON_CPU": "1"},
}


# Tests that cannot pass on a CPU by design and, at world size > 1, hang the other ranks when they fail on one
# (the failing rank leaves before a collective the others are already in): deselected, and listed in the JSON
# with the reason. Only tests whose feature is GPU-only by megatron's own code are here.
CPU_IMPOSSIBLE: dict[str, str] = {
    "tests/unit_tests/test_utils.py::test_straggler_detector": (
        "StragglerDetector is off without CUDA ('No CUDA, No Support', megatron/core/utils.py "
        "StragglerDetector.configure): rank 0's control server never starts, its HTTP request fails, and the "
        "other ranks wait in the report's collective"
    ),
}


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (read from /proc: torchrun's workers leave its process group)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group and every process below it (a worker holding the output pipe would
    otherwise keep ``communicate()`` waiting after its launcher is gone)."""
    below = _descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Left out of "rest": GPU-only or optional-package areas (inference kernels, elastic/generalized TP, resharding,
# RL, tools, multimodal mimo, mamba's ssm kernels); everything else of tests/unit_tests not named above is in it.
REST_EXCLUDED = (
    "inference/",
    "elastification/",
    "generalized_tensor_parallel/",
    "resharding/",
    "rl/",
    "tools/",
    "models/mimo/",
    "ssm/",
)


def rest_subset(unit_tests: Path) -> tuple[str, ...]:
    """The named subset "rest": every ``test_*.py`` outside the default and wider subsets and :data:`REST_EXCLUDED`."""
    named = {
        f.relative_to(unit_tests).as_posix() for n in ("default", "wider") for f in test_files(unit_tests, SUBSETS[n])
    }
    every = sorted(p.relative_to(unit_tests).as_posix() for p in unit_tests.rglob("test_*.py"))
    return tuple(f for f in every if f not in named and not f.startswith(REST_EXCLUDED))


def test_files(unit_tests: Path, subset: tuple[str, ...]) -> list[Path]:
    """The test files a subset names (directories expanded to their ``test_*.py``, sorted)."""
    files: list[Path] = []
    for item in subset:
        path = unit_tests / item
        if path.is_dir():
            files.extend(sorted(path.rglob("test_*.py")))
        elif path.is_file():
            files.append(path)
        else:
            raise SystemExit(f"{path}: no such test file or directory in this Megatron-LM checkout")
    return files


def _this_python_first() -> str:
    """A folder whose ``python3`` and ``python3-config`` are the interpreter running the tests.

    megatron's datasets build their C++ helpers with ``make`` (``python3 -m pybind11 --includes``,
    ``python3-config --extension-suffix``); on PATH those may be another Python (a pyenv shim reads the
    checkout's ``.python-version``: Megatron-LM's says 3.12), and the module built is one the tests' Python
    cannot import."""
    folder = REPO / ".cache" / "this-python"
    folder.mkdir(parents=True, exist_ok=True)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base_bin = Path(sys.base_prefix) / "bin"
    for name, target in (
        ("python3", Path(sys.executable)),
        ("python3-config", base_bin / f"python{version}-config"),
    ):
        link = folder / name
        if target.exists() and (not link.is_symlink() or Path(os.readlink(link)) != target):
            link.unlink(missing_ok=True)
            link.symlink_to(target)
    return str(folder)


def _env(
    root: Path,
    mode: str,
    fl_patch_tree: Path,
    deps_dir: Path = DEPS_DIR,
    extra: tuple[dict[str, str], tuple[str, ...]] | None = None,
) -> dict[str, str]:
    """The test processes' environment; ``extra``: (variables, ``PYTHONPATH`` entries) a caller adds, such as
    a registry of its own (``bench/oracle.py`` registers its identical copies this way)."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k == "MG_FL_PREFER")}
    env["PATH"] = os.pathsep.join([_this_python_first(), env.get("PATH", "")])
    package_root = fl_patch_tree / "src" if (fl_patch_tree / "src" / "fl_patch").is_dir() else fl_patch_tree
    paths = [str(fl_patch_tree / "sitecustomize_template"), str(package_root), str(deps_dir), str(SUPPORT)]
    paths += [*(extra[1] if extra else ()), str(root)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(
        WORLD_SIZE="1",
        RANK="0",
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        PYTHONWARNINGS="ignore",
        CUDA_DEVICE_MAX_CONNECTIONS="1",
    )
    env.update(MODES[mode])
    if extra:
        env.update(extra[0])
    return env


def _merge_ranks(per_rank: list[dict[str, str]]) -> dict[str, str]:
    """One outcome per test: ``passed`` only where every rank passed it; else the first rank's other outcome."""
    merged: dict[str, str] = {}
    for test_id in sorted({k for outcomes in per_rank for k in outcomes}):
        seen = [outcomes.get(test_id, "error") for outcomes in per_rank]  # a rank without it never finished it
        merged[test_id] = "passed" if all(o == "passed" for o in seen) else next(o for o in seen if o != "passed")
    return merged


def run_file(
    root: Path,
    test_file: Path,
    mode: str,
    per_test: int,
    per_file: int,
    fl_patch_tree: Path = REPO,
    deps_dir: Path = DEPS_DIR,
    nproc: int = 1,
    extra: tuple[dict[str, str], tuple[str, ...]] | None = None,
) -> dict[str, object]:
    """One pytest process for one test file (``nproc`` > 1: one per rank under torchrun); its outcomes and how it ended."""
    rel = test_file.relative_to(root).as_posix()
    with tempfile.TemporaryDirectory(prefix="mlm-ut-") as tmp:
        results = Path(tmp) / "results.{rank}.jsonl"
        env = _env(root, mode, fl_patch_tree, deps_dir, extra)
        env["FL_PATCH_MLM_RESULTS"] = str(results)
        launcher: list[str] = []
        if nproc > 1:
            for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
                env.pop(name)  # torchrun sets them per rank
            launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        cmd = [
            sys.executable,
            *launcher,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "mlm_results_plugin",
            "-o",
            "addopts=",
            f"--timeout={per_test}",
            # several ranks: a rank stuck in a collective (a peer failed before it) never returns to Python, where
            # the signal method would act; the thread method dumps its stack and ends it, and torchrun the rest
            f"--timeout-method={'thread' if nproc > 1 else 'signal'}",
            *(f"--deselect={test_id}" for test_id in CPU_IMPOSSIBLE),
            "--basetemp",
            str(Path(tmp) / "basetemp"),
            rel,
        ]
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=per_file)
            ended = "exit" if proc.returncode in (0, 1, 5) else f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            output, _ = proc.communicate()
            ended = f"killed after {per_file} s"
        seconds = time.perf_counter() - start
        per_rank: list[dict[str, str]] = []
        details: dict[str, str] = {}
        for rank in range(nproc):
            rank_results = Path(str(results).replace("{rank}", str(rank)))
            rank_outcomes: dict[str, str] = {}
            if rank_results.exists():
                for line in rank_results.read_text(encoding="utf-8").splitlines():
                    record = json.loads(line)
                    rank_outcomes[record["id"]] = record["outcome"]
                    if record["detail"] and record["id"] not in details:
                        details[record["id"]] = (f"rank {rank}: " if nproc > 1 else "") + record["detail"]
            per_rank.append(rank_outcomes)
        outcomes = _merge_ranks(per_rank) if nproc > 1 else per_rank[0]
        # no outcome at all: killed, or pytest (or torchrun) ended before any test ran; exit 5 alone is
        # pytest's "no tests collected" (every test deselected), which is not an error
        if not outcomes and (ended != "exit" or proc.returncode not in (0, 5)):
            outcomes[rel] = "error"
            tail = output.decode(errors="replace").strip().splitlines()[-3:]
            details[rel] = f"{ended} (exit {proc.returncode}), no test ran: " + " | ".join(tail)
    return {
        "file": rel,
        "mode": mode,
        "world_size": nproc,
        "ended": ended,
        "seconds": round(seconds, 1),
        "outcomes": outcomes,
        "details": details,
    }


def _counts(outcomes: dict[str, str]) -> dict[str, int]:
    counted = Counter(outcomes.values())
    return {key: counted.get(key, 0) for key in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}


def _ensure_deps(install: bool, deps_dir: Path = DEPS_DIR) -> None:
    missing = [m for m in DEP_MODULES if not (deps_dir / m).exists() and not (deps_dir / f"{m}.py").exists()]
    if not missing:
        return
    if not install:
        raise SystemExit(
            f"Megatron-LM's test tree needs {', '.join(missing)} (not fl_patch dependencies): "
            f"rerun with --install-deps (installs {' '.join(DEPS)} into {deps_dir})"
        )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(deps_dir),
            *DEPS,
        ],
        check=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--megatron-lm", type=Path, required=True, help="a Megatron-LM checkout (its tests/unit_tests is run)"
    )
    parser.add_argument(
        "--subset",
        default="default",
        help=f"a named subset ({', '.join(SUBSETS)}, rest) or comma-separated paths under tests/unit_tests",
    )
    parser.add_argument(
        "--modes", default="off,on", help="comma-separated: none (FL_PATCH=0), off (transfer off), on (transfer on)"
    )
    parser.add_argument("--baseline", type=Path, help="a JSON written earlier: its 'off' outcomes are the baseline too")
    parser.add_argument(
        "--json", type=Path, default=REPO / "docs" / "megatron_unit_tests_cpu.json", help="where to write every outcome"
    )
    parser.add_argument("--jobs", type=int, default=1, help="test files run at once")
    parser.add_argument(
        "--nproc",
        type=int,
        default=1,
        help="world size: > 1 runs each file under torchrun --nproc-per-node N (gloo); a test counts as passed "
        "only when it passes on every rank",
    )
    parser.add_argument(
        "--compare", type=Path, help="a JSON written at world size 1: its 'on' passes that do not pass here are listed"
    )
    parser.add_argument(
        "--stop-after",
        type=float,
        default=0.0,
        help="seconds: a file not started by then is not run (listed under not_run); the JSON is still written",
    )
    parser.add_argument("--per-test-timeout", type=int, default=120)
    parser.add_argument("--per-file-timeout", type=int, default=600)
    parser.add_argument(
        "--fl-patch", type=Path, default=REPO, help="the fl_patch tree that activates (default: this one)"
    )
    parser.add_argument("--rev", help="the Megatron-LM revision, for the record (default: the checkout's HEAD)")
    parser.add_argument("--deps-dir", type=Path, default=DEPS_DIR, help="where Megatron-LM's test dependencies are")
    parser.add_argument(
        "--install-deps", action="store_true", help=f"pip install Megatron-LM's test dependencies into {DEPS_DIR}"
    )
    args = parser.parse_args(argv)

    root = args.megatron_lm.resolve()
    unit_tests = root / "tests" / "unit_tests"
    if not unit_tests.is_dir():
        raise SystemExit(f"{root}: no tests/unit_tests here (pass a Megatron-LM checkout)")
    _ensure_deps(args.install_deps, args.deps_dir)
    if args.subset == "rest":
        subset = rest_subset(unit_tests)
    else:
        subset = SUBSETS.get(args.subset) or tuple(item.strip() for item in args.subset.split(",") if item.strip())
    files = test_files(unit_tests, subset)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in MODES:
            raise SystemExit(f"unknown mode {mode!r} (none, off, on)")

    runs: dict[str, list[dict[str, object]]] = {}
    not_run: dict[str, list[str]] = {}
    started = time.monotonic()

    def run_unless_late(*run_args: Any) -> dict[str, object] | None:
        if args.stop_after and time.monotonic() - started > args.stop_after:
            return None  # past --stop-after: not started (recorded as not run, never as a failure)
        return run_file(*run_args)

    for mode in modes:
        print(f"-- mode {mode}: {len(files)} test files", flush=True)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [
                pool.submit(
                    run_unless_late,
                    root,
                    f,
                    mode,
                    args.per_test_timeout,
                    args.per_file_timeout,
                    args.fl_patch.resolve(),
                    args.deps_dir.resolve(),
                    args.nproc,
                )
                for f in files
            ]
            runs[mode] = []
            for test_file, future in zip(files, futures, strict=True):
                result = future.result()
                if result is None:
                    not_run.setdefault(mode, []).append(test_file.relative_to(root).as_posix())
                    continue
                runs[mode].append(result)
                counts = _counts(result["outcomes"])  # type: ignore[arg-type]
                print(
                    f"   {result['file']}: {counts['passed']} passed, {counts['failed'] + counts['error']} failed, {counts['skipped']} skipped ({result['seconds']} s, {result['ended']})",
                    flush=True,
                )

    outcomes = {mode: {k: v for r in runs[mode] for k, v in r["outcomes"].items()} for mode in modes}  # type: ignore[union-attr]
    summary = {mode: _counts(outcomes[mode]) for mode in modes}
    baseline: dict[str, str] = dict(outcomes.get("off", {}))
    if args.baseline is not None:
        stored = json.loads(args.baseline.read_text(encoding="utf-8"))
        baseline_stored = stored["outcomes"].get("off", {})
        baseline.update({k: v for k, v in baseline_stored.items() if v == "passed"})
    regressions = sorted(
        k for k, v in baseline.items() if v == "passed" and "on" in outcomes and outcomes["on"].get(k) != "passed"
    )
    gained = sorted(k for k, v in outcomes.get("on", {}).items() if v == "passed" and baseline.get(k) != "passed")

    print()
    for mode in modes:
        c = summary[mode]
        print(
            f"{mode:>4}: {c['passed']} passed, {c['failed'] + c['error']} failed, {c['skipped']} skipped ({c['failed']} failed, {c['error']} errors, {c['xfailed']} xfailed)"
        )
    if "on" in outcomes and baseline:
        print(
            f"passed with the transfer on but not off: {len(gained)}; passed off (or in the baseline) but not on: {len(regressions)}"
        )
        for test_id in regressions:
            print(f"   REGRESSION {test_id}: {outcomes['on'].get(test_id, 'not run')}")

    compared: dict[str, object] = {}
    if args.compare is not None and "on" in outcomes:
        at_one = json.loads(args.compare.read_text(encoding="utf-8"))["outcomes"].get("on", {})
        here = outcomes["on"]
        lost = sorted(k for k in here if at_one.get(k) == "passed" and here[k] != "passed")
        compared = {
            "against": str(args.compare),
            "passed_at_world_size_1": sum(1 for k in here if at_one.get(k) == "passed"),
            "passed_here": sum(1 for v in here.values() if v == "passed"),
            "passed_here_not_at_1": sorted(k for k, v in here.items() if v == "passed" and at_one.get(k) != "passed"),
            "passed_at_1_not_here": lost,
        }
        print(
            f"against {args.compare}: {compared['passed_at_world_size_1']} of these passed at world size 1, "
            f"{compared['passed_here']} pass here; {len(lost)} passed at 1 and not here"
        )
        for test_id in lost:
            print(f"   LOST {test_id}: {here[test_id]} ({record_detail(runs, test_id)})")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "world_size": args.nproc,
        "compared": compared,
        "megatron_lm": str(root),
        "megatron_lm_rev": args.rev or _commit(root),
        "fl_patch_rev": _commit(args.fl_patch.resolve()),
        "megatron_core": _version("megatron-core"),
        "torch": _version("torch"),
        "subset": list(subset),
        "files": len(files),
        "not_run": not_run,
        "cannot_pass_on_cpu": {
            k: v for k, v in CPU_IMPOSSIBLE.items() if any(str(f).endswith(k.split("::")[0]) for f in files)
        },
        "summary": summary,
        "gained": gained,
        "regressions": regressions,
        "per_file": {
            mode: [
                {k: r[k] for k in ("file", "ended", "seconds")} | {"counts": _counts(r["outcomes"])} for r in runs[mode]
            ]
            for mode in modes
        },  # type: ignore[arg-type]
        "outcomes": outcomes,
        "details": {mode: {k: v for r in runs[mode] for k, v in r["details"].items()} for mode in modes},  # type: ignore[union-attr]
    }
    args.json.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")
    return 1 if regressions else 0


def record_detail(runs: dict[str, list[dict[str, object]]], test_id: str) -> str:
    """The first line recorded for a test in the 'on' runs (empty when none)."""
    for result in runs.get("on", []):
        detail = result["details"].get(test_id)  # type: ignore[union-attr]
        if detail:
            return str(detail)
    return ""


def _version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _commit(root: Path) -> str | None:
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    return head.stdout.strip() or None if head.returncode == 0 else None


if __name__ == "__main__":
    sys.exit(main())
