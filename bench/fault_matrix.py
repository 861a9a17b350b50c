"""Fault matrix: every way a plugin can break, run for real, in default and strict mode.

Each case is a registry module with one broken registration (or a broken source),
run under ``python -m fl_patch`` on a small program that imports real megatron-core
and calls the upstream code the registration targets. Tallied:

* lost silently: the default-mode run printed no ``FlPatchWarning`` naming the
  target (or source) and the cause. Must be 0.
* non-strict run broken: the default-mode run exited non-zero. Must be 0.
* strict not failing: the ``FL_PATCH_STRICT=1`` run exited zero, or without the
  message. Must be 0.

Run:  .venv/bin/python bench/fault_matrix.py [--json out.json] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUPPORT = REPO / "tests" / "support"

PROGRAM = """
import sys
from megatron.core import utils
from megatron.core.optimizer import clip_grads, optimizer
from megatron.core import optimizer_param_scheduler
assert utils.divide(6, 3) == 2, "upstream divide did not run"
assert clip_grads.get_grad_norm_fp32.__module__ == "megatron.core.optimizer.clip_grads"
assert optimizer_param_scheduler.OptimizerParamScheduler.__module__ == "megatron.core.optimizer_param_scheduler"
print("PROGRAM-OK")
"""


@dataclass(frozen=True)
class Case:
    name: str
    registry: str  # body of the registry module ('' when the case is in the environment)
    must_name: tuple[str, ...]  # what the warning / error must contain
    env: tuple[tuple[str, str], ...] = ()


def _register(target: str, impl: str) -> str:
    return f"from fl_patch import register\nregister({target!r}, {impl!r})\n"


DIVIDE = "megatron.core.utils.divide"
CASES = [
    Case(
        "impl raises ImportError",
        _register(DIVIDE, "fltest_broken.import_error.impl"),
        (DIVIDE, "fltest_broken.import_error.impl", "fltest_no_such_dependency"),
    ),
    Case(
        "impl SyntaxError",
        _register(DIVIDE, "fltest_broken.syntax_error.impl"),
        (DIVIDE, "fltest_broken.syntax_error.impl", "SyntaxError"),
    ),
    Case(
        "impl raises at import",
        _register(DIVIDE, "fltest_broken.raises_at_import.impl"),
        (DIVIDE, "fltest_broken.raises_at_import.impl", "vendor library initialisation failed"),
    ),
    Case(
        "impl attribute missing",
        _register(DIVIDE, "fltest_broken.usable.no_such_impl"),
        (DIVIDE, "fltest_broken.usable.no_such_impl", "has no attribute 'no_such_impl'"),
    ),
    Case(
        "impl not callable",
        _register(DIVIDE, "fltest_broken.usable.NOT_CALLABLE"),
        (DIVIDE, "fltest_broken.usable.NOT_CALLABLE", "not callable"),
    ),
    Case(
        "target module missing",
        _register("megatron.core.optimizer.no_such_module.fn", "fltest_broken.usable.impl"),
        ("megatron.core.optimizer.no_such_module.fn", "no attribute or submodule 'no_such_module'"),
    ),
    Case(
        "target attribute renamed",
        _register("megatron.core.optimizer.clip_grads.get_grad_norm", "fltest_broken.usable.impl"),
        ("megatron.core.optimizer.clip_grads.get_grad_norm", "has no attribute 'get_grad_norm'"),
    ),
    Case(
        "class replacement not a subclass",
        _register(
            "megatron.core.optimizer_param_scheduler.OptimizerParamScheduler", "fltest_broken.usable.NotASubclass"
        ),
        ("OptimizerParamScheduler", "fltest_broken.usable.NotASubclass", "does not subclass"),
    ),
    Case(
        "registry module fails to import",
        "",
        ("fltest_broken.registry_raises", "missing vendor SDK"),
        env=(("FL_PATCH_REGISTRY", "fltest_broken.registry_raises"),),
    ),
    Case(
        "broken entry point",
        "",
        ("fltest_broken.registry_missing_module", "ModuleNotFoundError"),
        env=(("FL_PATCH_ENTRY_POINTS", "1"),),
    ),
    Case(
        "unknown vendor in MG_FL_PREFER",
        _register(DIVIDE, "fltest_broken.usable.impl").replace(")\n", ", vendor='musa')\n"),
        ("MG_FL_PREFER", "'kunlunxin'"),
        env=(("MG_FL_PREFER", "kunlunxin"),),
    ),
]


def _environment(case: Case, workdir: Path, strict: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k == "MG_FL_PREFER")}
    paths = [str(workdir), str(REPO), str(SUPPORT)]
    if case.name == "broken entry point":
        dist = workdir / "fltest_broken_ep-1.0.dist-info"
        dist.mkdir(exist_ok=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fltest-broken-ep\nVersion: 1.0\n")
        (dist / "entry_points.txt").write_text(
            "[fl_patch.registries]\nvendor = fltest_broken.registry_missing_module\n"
        )
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONWARNINGS"] = "ignore::UserWarning:megatron,ignore::DeprecationWarning"
    env["FL_PATCH_ENTRY_POINTS"] = "0"
    env.update(case.env)
    if case.registry:
        env["FL_PATCH_REGISTRY"] = "fault_case_registry"
    if strict:
        env["FL_PATCH_STRICT"] = "1"
    return env


def run_case(case: Case) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if case.registry:
            (workdir / "fault_case_registry.py").write_text(case.registry)
        (workdir / "program.py").write_text(textwrap.dedent(PROGRAM))
        results: dict[str, object] = {"case": case.name}
        for mode in ("default", "strict"):
            env = _environment(case, workdir, strict=mode == "strict")
            proc = subprocess.run(
                [sys.executable, "-m", "fl_patch", str(workdir / "program.py")],
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=300,
            )
            output = proc.stdout + proc.stderr
            lines = [line for line in output.splitlines() if ("FlPatchWarning" in line or "FlPatchError" in line)]
            named = [line for line in lines if all(part in line for part in case.must_name)]
            results[mode] = {"exit": proc.returncode, "named": len(named), "ran": "PROGRAM-OK" in proc.stdout}
            if os.environ.get("FAULT_MATRIX_VERBOSE"):
                print(f"--- {case.name} [{mode}] exit {proc.returncode}\n{output[-3000:]}", file=sys.stderr)
        default, strict = results["default"], results["strict"]
        results["lost_silently"] = default["named"] == 0  # type: ignore[index]
        results["non_strict_broken"] = default["exit"] != 0 or not default["ran"]  # type: ignore[index]
        results["warned_once"] = default["named"] == 1  # type: ignore[index]
        results["strict_not_failing"] = strict["exit"] == 0 or strict["named"] == 0  # type: ignore[index]
        return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(run_case, CASES))
    print("| case | default: exit | default: warnings naming it | strict: exit |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['case']} | {row['default']['exit']} | {row['default']['named']} | {row['strict']['exit']} |")  # type: ignore[index]
    summary = {
        "cases": len(rows),
        "lost_silently": sum(bool(r["lost_silently"]) for r in rows),
        "non_strict_broken": sum(bool(r["non_strict_broken"]) for r in rows),
        "warned_more_than_once": sum(not r["warned_once"] and not r["lost_silently"] for r in rows),
        "strict_not_failing": sum(bool(r["strict_not_failing"]) for r in rows),
    }
    print()
    print(" ".join(f"{key}={value}" for key, value in summary.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "cases": rows}, indent=2))
    bad = summary["lost_silently"] + summary["non_strict_broken"] + summary["strict_not_failing"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
