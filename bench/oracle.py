"""The oracle (issue 43 item 1): megatron with an identical copy of everything patched must not change.

``tests/support/oracle/`` registers, for every function, method (plain, static, class), property
and class defined in megatron-core and megatron.training (the catalogue
``oracle_targets.json``, written by ``oracle_scan.py``), an impl that is an identical copy of
the upstream object. Each part runs the same thing with and without that set and compares:

* ``demo``: ``examples/train_gpt.py`` (local spec; TE spec + MoE + MLA; MoE fusions; fp16 with
  recompute, saved and resumed; TP=2, DP=2 with the distributed optimizer, EP=2 under torchrun):
  every loss bit for bit;
* ``pretrain``: Megatron-LM's ``pretrain_gpt.py`` (TE spec, MoE, MLA; ``bench/pretrain_flags.py``'s
  flags): the logged losses, and every tensor of the final checkpoint (``--ckpt-format torch``)
  bit for bit;
* ``unit``: ``bench/megatron_unit_tests.py``'s selection at ``--nproc`` ranks: the sets of passing
  test ids;
* ``import``: wall time of importing ``megatron.core.models.gpt.gpt_model`` and
  ``megatron.core.optimizer`` with 0, 1000 and every registration (interleaved, medians);
* ``repros``: each minimal reproduction of ``ORACLE_FINDINGS.md`` (exit 1: the defect is there).

Every difference is a defect of the engine. On an engine with known defects, ``--exclude`` (targets,
or ``@FILE`` of a JSON list or of ``{target: finding}``) leaves targets out to reach the next one.
Each part writes ``docs/oracle_<part>.json`` (``--json`` to choose) and prints a table.

Run::

    .venv/bin/python bench/oracle.py --part demo [--kinds functions,methods] [--sample 500 --seed 1]
    .venv/bin/python bench/oracle.py --part pretrain --megatron-lm $MLM/core_v0.19.0
    .venv/bin/python bench/oracle.py --part unit --megatron-lm $MLM/core_v0.19.0 --nproc 2
    .venv/bin/python bench/oracle.py --part import
    .venv/bin/python bench/oracle.py --part repros
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ORACLE_DIR = REPO / "tests" / "support" / "oracle"
sys.path.insert(0, str(ORACLE_DIR))
sys.path.insert(0, str(REPO / "bench"))

import oracle_catalogue as catalogue  # noqa: E402  (the oracle's directory, first on sys.path)
from oracle_run import OFF, Reports, Selection, oracle_env, oracle_vars  # noqa: E402

DEMO = REPO / "examples" / "train_gpt.py"


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FL_PATCH", "MG_FL", "ORACLE_"))}
    env["PYTHONWARNINGS"] = "ignore"
    env["PYTHONPATH"] = ""
    return env


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# ------------------------------------------------------------------------------------------ demo
@dataclass(frozen=True)
class DemoRun:
    name: str
    args: tuple[str, ...]
    nproc: int = 1
    resume_at: int = 0  # > 0: save at this step, then a second process resumes from it


DEMO_RUNS: tuple[DemoRun, ...] = (
    DemoRun("local", ("--steps", "5")),
    DemoRun("te_moe_mla", ("--steps", "4", "--spec", "te", "--experts", "4", "--grouped-gemm", "--mla")),
    DemoRun("te_moe_fusion", ("--steps", "4", "--spec", "te", "--experts", "4", "--moe-fusion")),
    DemoRun("fp16_recompute_resume", ("--steps", "6", "--precision", "fp16", "--recompute"), resume_at=3),
    DemoRun("bf16", ("--steps", "4", "--precision", "bf16")),
    DemoRun("tp2", ("--steps", "4", "--tp", "2"), nproc=2),
    DemoRun("dp2_distopt", ("--steps", "4", "--distributed-optimizer"), nproc=2),
    DemoRun("ep2_te_moe", ("--steps", "4", "--spec", "te", "--experts", "4", "--ep", "2"), nproc=2),
)


def run_demo(run: DemoRun, selection: Selection, limit: float = 600) -> dict[str, Any]:
    """One demo run (and its resumed second half); its losses and the oracle's report."""
    with tempfile.TemporaryDirectory(prefix="oracle-demo-") as tmp:
        where = Path(tmp)
        env = oracle_env(_base_env(), selection, where)
        launcher = (
            ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={run.nproc}"] if run.nproc > 1 else []
        )
        commands = []
        if run.resume_at:
            ckpt = where / "ckpt"
            first = [*run.args, "--save", str(ckpt), "--save-interval", str(run.resume_at)]
            commands.append(("first", first))
            commands.append(("resumed", [*run.args, "--load", str(ckpt / f"step_{run.resume_at:06d}")]))
        else:
            commands.append(("run", list(run.args)))
        losses: dict[str, list[float]] = {}
        out: dict[str, Any] = {"ok": True, "error": ""}
        start = time.perf_counter()
        for label, args in commands:
            log = where / f"{label}.jsonl"
            cmd = [sys.executable, "-m", "fl_patch", *launcher, str(DEMO), *args, "--quiet", "--log-file", str(log)]
            try:
                proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=limit)
                rc, text = proc.returncode, proc.stdout + proc.stderr
            except subprocess.TimeoutExpired as exc:
                rc, text = None, str(exc.stderr or "")
            if rc != 0:
                out.update(ok=False, error=f"{label}: exit {rc}\n{_tail(text, 25)}")
                break
            losses[label] = [json.loads(line)["loss"] for line in log.read_text().splitlines()]
        out["seconds"] = round(time.perf_counter() - start, 1)
        out["losses"] = losses
        out["report"] = Reports.read(where).summary(selection.entries())
        return out


def same_bits(a: list[float], b: list[float]) -> bool:
    """Equal as float64 bit patterns (NaN equals NaN with the same bits)."""
    import struct

    return len(a) == len(b) and all(struct.pack("<d", x) == struct.pack("<d", y) for x, y in zip(a, b, strict=True))


def part_demo(args: argparse.Namespace, selection: Selection) -> dict[str, Any]:
    chosen = [r for r in DEMO_RUNS if not args.only or r.name.startswith(tuple(args.only.split(",")))]
    rows = []
    for run in chosen:
        ref = run_demo(run, OFF)
        with_oracle = run_demo(run, selection)
        identical = (
            ref["ok"]
            and with_oracle["ok"]
            and all(same_bits(ref["losses"].get(k, []), with_oracle["losses"].get(k, [])) for k in ref["losses"])
        )
        report = with_oracle["report"]
        rows.append(
            {
                "name": run.name,
                "args": " ".join(run.args),
                "nproc": run.nproc,
                "identical": identical,
                "reference": ref,
                "oracle": with_oracle,
            }
        )
        applied = report["by_status"].get("applied", 0)
        shown = with_oracle["error"].splitlines()[-1][:150] if with_oracle["error"] else ""
        print(
            f"{'same' if identical else 'DIFF'}  {run.name:<24} {run.nproc} rank(s)  applied {applied:>5} of "
            f"{report['registered']}, problems {len(report['problems'])}, waiting though loaded "
            f"{len(report['waiting_though_module_loaded'])}  ({ref['seconds']} s / {with_oracle['seconds']} s) {shown}",
            flush=True,
        )
        if not ref["ok"]:
            print(f"      the reference run failed: {ref['error'][-600:]}")
    return {"runs": rows, "identical": sum(r["identical"] for r in rows), "of": len(rows)}


# ------------------------------------------------------------------------------------------ pretrain
# pretrain_flags.py's configurations: the TE spec (megatron's default), MoE, MLA, at 1 and 2 ranks
PRETRAIN_RUNS = (
    "dense_te_default",
    "moe_grouped_gemm",
    "mla_yarn",
    "mla_moe_mtp",
    "dense_tp2_sp",
    "moe_ep2_grouped",
)


def run_pretrain(config: Any, megatron_lm: Path, where: Path, selection: Selection, limit: float) -> dict[str, Any]:
    """``pretrain_gpt.py`` with ``config``'s flags in ``where``, saving a ``torch`` checkpoint at the end."""
    import pretrain_flags

    where.mkdir(parents=True)
    for name in pretrain_flags.PRETRAIN_FILES:
        shutil.copy(megatron_lm / name, where / name)
    env = oracle_env(_base_env(), selection, where)
    env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    for name, value in config.env:
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    launcher: list[str] = []
    if config.nproc == 1:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    else:
        launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={config.nproc}"]
    iters = str(pretrain_flags.ITERS)
    save = ["--save", "ckpt", "--save-interval", iters, "--ckpt-format", "torch"]
    cmd = [sys.executable, "-m", "fl_patch", *launcher, "pretrain_gpt.py", *config.base, *config.flags, *save]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=limit)
        rc, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, log = None, str(exc.stdout or "") + str(exc.stderr or "")
    losses = pretrain_flags._losses(log)
    ok = rc == 0 and len(losses) >= pretrain_flags.ITERS and all(math.isfinite(x) for x in losses)
    return {
        "ok": ok,
        "seconds": round(time.perf_counter() - start, 1),
        "losses": losses,
        "error": "" if ok else f"exit {rc}: {pretrain_flags._error_line(log)}\n{_tail(log, 25)}",
        "report": Reports.read(where).summary(selection.entries()),
    }


def compare_checkpoints(ref: Path, other: Path) -> dict[str, Any]:
    env = _base_env()
    env["PYTHONPATH"] = str(REPO / "src")
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", str(ORACLE_DIR / "oracle_compare_ckpt.py"), str(ref), str(other)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    last = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
    if not last:
        return {"files": 0, "differences": [f"the comparison failed: {_tail(proc.stderr, 6)}"]}
    return dict(json.loads(last[0]))


def part_pretrain(args: argparse.Namespace, selection: Selection) -> dict[str, Any]:
    import pretrain_flags

    if args.megatron_lm is None:
        raise SystemExit("--part pretrain needs --megatron-lm (a Megatron-LM checkout, core_v0.19.0)")
    names = [n for n in PRETRAIN_RUNS if not args.only or n.startswith(tuple(args.only.split(",")))]
    configs = {c.name: c for c in pretrain_flags.CONFIGS}
    rows = []
    for name in names:
        config = configs[name]
        with tempfile.TemporaryDirectory(prefix="oracle-pretrain-") as tmp:
            ref = run_pretrain(config, args.megatron_lm, Path(tmp) / "ref", OFF, args.limit)
            with_oracle = run_pretrain(config, args.megatron_lm, Path(tmp) / "oracle", selection, args.limit)
            ckpt: dict[str, Any] = {"files": 0, "differences": ["not compared: a run failed"]}
            if ref["ok"] and with_oracle["ok"]:
                ckpt = compare_checkpoints(Path(tmp) / "ref" / "ckpt", Path(tmp) / "oracle" / "ckpt")
        same_losses = ref["ok"] and with_oracle["ok"] and ref["losses"] == with_oracle["losses"]
        identical = bool(same_losses and ckpt["files"] and not ckpt["differences"])
        report = with_oracle["report"]
        rows.append(
            {
                "name": name,
                "flags": " ".join(config.flags),
                "nproc": config.nproc,
                "identical": identical,
                "same_logged_losses": same_losses,
                "checkpoint": ckpt,
                "reference": ref,
                "oracle": with_oracle,
            }
        )
        shown = with_oracle["error"].splitlines()[0][:160] if with_oracle["error"] else ""
        if not shown and ckpt["differences"]:
            shown = f"checkpoint: {ckpt['differences'][0][:160]}"
        print(
            f"{'same' if identical else 'DIFF'}  {name:<20} {config.nproc} rank(s)  losses "
            f"{'same' if same_losses else 'differ'}, checkpoint files {ckpt['files']} differences "
            f"{len(ckpt['differences'])}; applied {report['by_status'].get('applied', 0)} of {report['registered']}, "
            f"problems {len(report['problems'])}  ({ref['seconds']} s / {with_oracle['seconds']} s) {shown}",
            flush=True,
        )
        if not ref["ok"]:
            print(f"      the reference run failed: {ref['error'][-600:]}")
    return {
        "iterations": pretrain_flags.ITERS,
        "runs": rows,
        "identical": sum(r["identical"] for r in rows),
        "of": len(rows),
    }


# ------------------------------------------------------------------------------------------ unit
def scan_checkout(megatron_lm: Path, out: Path) -> dict[str, Any]:
    """The catalogue of the megatron the unit tests import: the checkout's own ``megatron/`` (it is on their
    ``PYTHONPATH``, before site-packages), scanned as ``oracle_scan.py`` scans the installed one."""
    env = _base_env()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(out.parent), str(ORACLE_DIR), str(megatron_lm)])
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", str(ORACLE_DIR / "oracle_scan.py"), "--out", str(out)],
        env=env,
        cwd=megatron_lm,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise SystemExit(f"scanning {megatron_lm}'s megatron failed:\n{_tail(proc.stderr, 20)}")
    print(proc.stdout.strip().splitlines()[-1], flush=True)
    data = catalogue.load(out)
    return {k: data[k] for k in ("modules_imported", "modules_failed", "registrable", "by_form", "skipped")}


def part_unit(args: argparse.Namespace, selection: Selection) -> dict[str, Any]:
    """The unit tests' selection, each file without and then with the oracle (interleaved: the machine's
    load falls on both alike); the JSON is rewritten after every file, so a run cut short still counts."""
    import megatron_unit_tests as mut

    if args.megatron_lm is None:
        raise SystemExit("--part unit needs --megatron-lm (a Megatron-LM checkout, core_v0.19.0)")
    root = args.megatron_lm.resolve()
    deps = args.deps_dir.resolve()
    mut._ensure_deps(args.install_deps, deps)
    files = mut.test_files(root / "tests" / "unit_tests", mut.SUBSETS[args.subset])
    if args.files:  # a part of the selection (a machine too busy for all of it): paths below tests/unit_tests
        unit_tests = root / "tests" / "unit_tests"
        files = [f for f in files if f.relative_to(unit_tests).as_posix().startswith(tuple(args.files.split(",")))]
    out = args.json or REPO / "docs" / f"oracle_unit_ws{args.nproc}.json"
    work = Path(tempfile.mkdtemp(prefix="oracle-unit-"))
    checkout_catalogue = work / "oracle_targets_checkout.json"
    scanned = scan_checkout(root, checkout_catalogue)
    selection = Selection(**{**vars(selection), "targets": str(checkout_catalogue)})
    entries = selection.entries()
    variants = {"without": OFF, "with": selection}
    outcomes: dict[str, dict[str, str]] = {v: {} for v in variants}
    details: dict[str, dict[str, str]] = {v: {} for v in variants}
    per_file: list[dict[str, Any]] = []
    started = time.perf_counter()
    record: dict[str, Any] = {}
    for test_file in files:
        row: dict[str, Any] = {"file": test_file.relative_to(root).as_posix()}
        for name, variant in variants.items():
            report_dir = work / name
            report_dir.mkdir(exist_ok=True)
            # the checkout's oracle_classes.py (written beside its catalogue) before the installed one's
            extra = (oracle_vars(variant, report_dir), (str(work), str(ORACLE_DIR)))
            result = mut.run_file(
                root, test_file, "on", args.per_test_timeout, args.per_file_timeout, REPO, deps, args.nproc, extra
            )
            outcomes[name].update(result["outcomes"])  # type: ignore[arg-type]
            details[name].update(result["details"])  # type: ignore[arg-type]
            passed = sum(1 for v in result["outcomes"].values() if v == "passed")  # type: ignore[attr-defined]
            row[name] = {"passed": passed, "ended": result["ended"], "seconds": result["seconds"]}
        per_file.append(row)
        lost_here = sorted(
            k for k, v in outcomes["without"].items() if v == "passed" and outcomes["with"].get(k) != "passed"
        )
        print(
            f"   {row['file']}: {row['without']['passed']} passed without, {row['with']['passed']} with "
            f"({row['without']['seconds']} s / {row['with']['seconds']} s); lost so far {len(lost_here)}",
            flush=True,
        )
        passed_without = {k for k, v in outcomes["without"].items() if v == "passed"}
        passed_with = {k for k, v in outcomes["with"].items() if v == "passed"}
        lost = sorted(passed_without - passed_with)
        gained = sorted(passed_with - passed_without)
        record = {
            "world_size": args.nproc,
            "subset": args.subset,
            "megatron_lm": str(root),
            "megatron_lm_rev": mut._commit(root),
            "checkout_catalogue": scanned,
            "files": len(files),
            "files_filter": args.files,
            "files_done": len(per_file),
            "seconds_so_far": round(time.perf_counter() - started, 1),
            "passed_without": len(passed_without),
            "passed_with": len(passed_with),
            "lost": {k: f"{outcomes['with'].get(k, 'not run')}: {details['with'].get(k, '')[:600]}" for k in lost},
            "gained": gained,
            "oracle_report": Reports.read(work / "with").summary(entries),
            "per_file": per_file,
            "outcomes": outcomes,
        }
        out.write_text(json.dumps(record, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    print(
        f"\n{record.get('passed_without')} passed without the oracle, {record.get('passed_with')} with; "
        f"lost {len(record.get('lost', {}))}, gained {len(record.get('gained', []))}"
    )
    for test_id, why in record.get("lost", {}).items():
        print(f"   LOST {test_id}: {why.splitlines()[0][:200] if why else ''}")
    shutil.rmtree(work, ignore_errors=True)
    return record


# ------------------------------------------------------------------------------------------ survivors
def part_survivors(args: argparse.Namespace, selection: Selection) -> dict[str, Any]:
    """Where the original stays reachable once patched (``oracle_survivors.py``), in the modules the demo imports."""
    with tempfile.TemporaryDirectory(prefix="oracle-survivors-") as tmp:
        where = Path(tmp)
        env = oracle_env(_base_env(), OFF, where)
        ref = subprocess.run(  # the demo's modules: those it has imported when its first step runs
            [sys.executable, "-m", "fl_patch", str(DEMO), "--steps", "1", "--quiet"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        modules = sorted(Reports.read(where).modules())
        if ref.returncode != 0 or not modules:
            raise SystemExit(f"the demo failed: {_tail(ref.stderr)}")
        out = where / "survivors.json"
        env = oracle_env(_base_env(), selection, where / "oracle")
        (where / "oracle").mkdir()
        proc = subprocess.run(
            [sys.executable, "-m", "fl_patch", str(ORACLE_DIR / "oracle_survivors.py"), str(out), *modules],
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if proc.returncode != 0 or not out.exists():
            raise SystemExit(f"the audit failed: {_tail(proc.stderr)}")
        result = json.loads(out.read_text())
    print(f"{result['applied']} registrations applied in the demo's {len(modules)} megatron modules")
    for kind, count in result["places"].items():
        print(f"{count:>6}  {kind}: {', '.join(e.split(': ')[-1] for e in result['examples'][kind][:3])}")
    print(
        f"{result['subclasses_of_the_original_defined_before_the_patch']:>6}  subclasses of a replaced class defined before the patch"
    )
    return {"modules": len(modules), **result}


# ------------------------------------------------------------------------------------------ import
IMPORT_CODE = (
    "import time; t, c = time.perf_counter(), time.process_time(); "
    "import megatron.core.models.gpt.gpt_model, megatron.core.optimizer; "
    "print('IMPORT', time.perf_counter() - t, time.process_time() - c)"
)


def _import_once(selection: Selection) -> tuple[tuple[float, float] | None, dict[str, Any], str]:
    """(wall, CPU) seconds of the import in a fresh ``python -m fl_patch``, the oracle's report, an error."""
    with tempfile.TemporaryDirectory(prefix="oracle-import-") as tmp:
        env = oracle_env(_base_env(), selection, Path(tmp))
        proc = subprocess.run(
            [sys.executable, "-m", "fl_patch", "-c", IMPORT_CODE], env=env, capture_output=True, text=True, timeout=300
        )
        found = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("IMPORT ")]
        seconds = (float(found[0][0]), float(found[0][1])) if found else None
        summary = Reports.read(Path(tmp)).summary(selection.entries())
        return seconds, summary, "" if seconds is not None else _tail(proc.stderr, 6)


def part_import(args: argparse.Namespace, selection: Selection) -> dict[str, Any]:
    everything = Selection(exclude=selection.exclude).entries()
    variants = {
        "0": OFF,
        "1000": Selection(sample=1000, seed=args.seed, exclude=selection.exclude),
        f"all ({len(everything)})": Selection(exclude=selection.exclude),
    }
    if selection.exclude:  # what the whole catalogue does, nothing left out
        variants[f"all, none excluded ({len(Selection().entries())})"] = Selection()
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    details: dict[str, Any] = {}
    for _ in range(args.repeat):
        for name, variant in variants.items():  # interleaved: this machine is shared and noisy
            seconds, summary, error = _import_once(variant)
            if seconds is not None:
                times[name].append(seconds)
            runs_detail = details.setdefault(name, {"build_seconds_runs": []})
            runs_detail.update(
                registered=summary["registered"],
                applied=summary["by_status"].get("applied", 0),
                load_seconds=summary["load_seconds"],
                register_seconds=summary["register_seconds"],
                error=error,
            )
            runs_detail["build_seconds_runs"].append(summary["build_seconds"])
    rows = {}
    base = [statistics.median(t[i] for t in times["0"]) if times["0"] else None for i in (0, 1)]
    for name, values in times.items():
        medians = [statistics.median(t[i] for t in values) if values else None for i in (0, 1)]
        ratios = [None if (m is None or not b) else round(m / b, 3) for m, b in zip(medians, base, strict=True)]
        rows[name] = {
            **details[name],
            "runs_wall_cpu": [[round(w, 4), round(c, 4)] for w, c in values],
            "median_wall_s": None if medians[0] is None else round(medians[0], 4),
            "median_cpu_s": None if medians[1] is None else round(medians[1], 4),
            "wall_vs_0": ratios[0],
            "cpu_vs_0": ratios[1],
        }
        shown = (
            "failed"
            if medians[0] is None
            else f"wall {medians[0]:.3f} s ({ratios[0]}x), CPU {medians[1]:.3f} s ({ratios[1]}x)"
        )
        build = statistics.median(details[name]["build_seconds_runs"])
        rows[name]["build_seconds_median"] = round(build, 4)
        print(
            f"{name:>12} registrations: {details[name]['applied']:>5} applied; import {shown}; the oracle's own: "
            f"catalogue {details[name]['load_seconds']:.3f} s, register() {details[name]['register_seconds']:.3f} s, "
            f"building copies {build:.3f} s {details[name]['error'][-200:]}",
            flush=True,
        )
    return {"what": IMPORT_CODE, "repeat": args.repeat, "exclude": selection.exclude, "rows": rows}


# ------------------------------------------------------------------------------------------ repros
def part_repros(args: argparse.Namespace, selection: Selection) -> dict[str, Any]:
    rows = []
    env = _base_env()
    env["PYTHONPATH"] = str(REPO / "src")
    for path in sorted((ORACLE_DIR / "repros").glob("r*.py")):
        proc = subprocess.run(
            [sys.executable, "-m", "fl_patch", str(path)], env=env, capture_output=True, text=True, timeout=300
        )
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith(("DEFECT", "OK"))]
        state = "defect" if proc.returncode == 1 else "fixed" if proc.returncode == 0 else f"exit {proc.returncode}"
        rows.append({"repro": path.name, "state": state, "lines": lines or [_tail(proc.stderr, 4)]})
        print(f"{state:<7} {path.name:<40} {(lines or [''])[0][:140]}", flush=True)
    return {"repros": rows}


# ------------------------------------------------------------------------------------------ main
def _exclusions(values: list[str]) -> str:
    found: list[str] = []
    for value in values:
        if value.startswith("@"):
            data = json.loads(Path(value[1:]).read_text())
            found.extend(data if isinstance(data, list) else list(data))
        else:
            found.extend(v for v in value.split(",") if v)
    return ",".join(found)


PARTS: dict[str, Callable[[argparse.Namespace, Selection], dict[str, Any]]] = {
    "demo": part_demo,
    "import": part_import,
    "pretrain": part_pretrain,
    "survivors": part_survivors,
    "unit": part_unit,
    "repros": part_repros,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", required=True, choices=sorted(PARTS))
    p.add_argument("--kinds", default="", help=f"families: {', '.join(catalogue.FAMILIES)} (all)")
    p.add_argument("--modules", default="", help="module prefixes (all)")
    p.add_argument("--exclude", action="append", default=[], help="targets, or @FILE (JSON list or mapping)")
    p.add_argument("--sample", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="", help="demo/pretrain: run names starting with these (comma-separated)")
    p.add_argument("--repeat", type=int, default=5, help="import: runs of each variant")
    p.add_argument("--megatron-lm", type=Path, help="pretrain, unit: a Megatron-LM checkout (core_v0.19.0)")
    p.add_argument("--limit", type=float, default=600, help="pretrain: seconds a run may take")
    p.add_argument("--nproc", type=int, default=1, help="unit: world size")
    p.add_argument("--subset", default="default", help="unit: a subset of bench/megatron_unit_tests.py")
    p.add_argument("--files", default="", help="unit: only the subset's files starting with these (comma-separated)")
    p.add_argument("--deps-dir", type=Path, default=REPO / ".cache" / "megatron-lm-test-deps", help="unit: test deps")
    p.add_argument("--install-deps", action="store_true", help="unit: pip install Megatron-LM's test deps there")
    p.add_argument("--per-test-timeout", type=int, default=120)
    p.add_argument("--per-file-timeout", type=int, default=900)
    p.add_argument("--json", type=Path, help="where to write (default docs/oracle_<part>.json)")
    args = p.parse_args(argv)
    selection = Selection(
        kinds=args.kinds, modules=args.modules, exclude=_exclusions(args.exclude), sample=args.sample, seed=args.seed
    )
    started = time.perf_counter()
    result = PARTS[args.part](args, selection)
    record = {
        "part": args.part,
        "selection": {k: v for k, v in vars(selection).items() if v},
        "registrations": len(selection.entries()),
        "megatron_core": catalogue.load().get("megatron_core"),
        "seconds": round(time.perf_counter() - started, 1),
        **result,
    }
    out = args.json or REPO / "docs" / f"oracle_{args.part}{f'_ws{args.nproc}' if args.part == 'unit' else ''}.json"
    out.write_text(json.dumps(record, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
