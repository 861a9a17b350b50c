"""Does ``--check --against`` predict what breaks? Static verdicts vs the real ``--check`` in each venv.

For each version: the static check (``python -m fl_patch --check --against SOURCE --json``,
run where that version is *not* installed) and the real one (``VENV/bin/python -m fl_patch
--check --json``, where it is: every target module imported, every impl loaded and
compared) give a verdict per registration under ``megatron``; the table counts

- hit: both say error;  miss: only the real one does;  false alarm: only the static one does;
- agree: neither does (ok, warning or not for this version in both).

Two sets of registrations: the packs as they are, and the packs of an older commit
(``--old-rev``, default the one before version gates and forwarding fixes), whose
breakage on 0.17.1 / 0.18.2 / main is what the static check must predict. The old packs are
extracted with ``git archive`` into a temporary package ``old_packs`` and registered with
``FL_PATCH_PACKS=none FL_PATCH_REGISTRY=old_packs.cpu.registry,old_packs.flaggems.registry``.

Run::

    .venv/bin/python bench/drift_validation.py [--venvs .cache/venvs] \\
        --against 0.17.1=$MLM/core_v0.17.1 --against 0.18.2=$MLM/core_v0.18.2 \\
        --against main=$MLM/main [--old-rev c383c6c] [--json out.json]

(``$MLM``: a directory of Megatron-LM trees, as for ``bench/version_matrix.py``; the venvs are
``scripts/version_venvs.sh``'s, in ``.cache/venvs`` of this checkout unless ``--venvs`` names others.)

(``SOURCE`` may also be a version string: its wheel is fetched into the cache.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _json_of(output: str) -> dict:
    return json.loads(output[output.find("{") : output.rfind("}") + 1])


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k == "MG_FL_PREFER")}
    env.update(FL_PATCH_CHILDREN="0", PYTHONWARNINGS="ignore", **extra)
    return env


def _real(python: str, env: dict[str, str]) -> dict[tuple[str, str], str]:
    proc = subprocess.run(
        [python, "-m", "fl_patch", "--check", "--json"], env=env, capture_output=True, text=True, timeout=900
    )
    data = _json_of(proc.stdout)
    return {
        (r["target"], r["vendor"]): r["level"] for r in data["registrations"] if r["target"].startswith("megatron.")
    }


def _static(source: str, env: dict[str, str]) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], list[str]]]:
    cmd = [sys.executable, "-m", "fl_patch", "--check", "--against", source, "--json"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    data = _json_of(proc.stdout)["against"][0]
    regs = [r for r in data["registrations"] if r["target"].startswith("megatron.")]
    return {(r["target"], r["vendor"]): r["level"] for r in regs}, {
        (r["target"], r["vendor"]): r["findings"] for r in regs
    }


def _old_packs(rev: str, dest: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "fl_patch/impls"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    (dest / "fl_patch" / "impls").rename(dest / "old_packs")
    for file in (dest / "old_packs").rglob("*.py"):
        file.write_text(re.sub(r"\bfl_patch\.impls\b", "old_packs", file.read_text()))


def compare(real: dict, static: dict) -> dict[str, list[str]]:
    table: dict[str, list[str]] = {"hit": [], "miss": [], "false alarm": [], "agree": []}
    for key in sorted(set(real) | set(static)):
        r, s = real.get(key) == "error", static.get(key) == "error"
        name = f"{key[0]} [{key[1]}]"
        table["hit" if r and s else "miss" if r else "false alarm" if s else "agree"].append(name)
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--venvs", default=str(REPO / ".cache" / "venvs"), help="directory of venvs named by version")
    p.add_argument("--against", action="append", required=True, help="VERSION=SOURCE (a tree, wheel or version)")
    p.add_argument("--old-rev", default="c383c6c")
    p.add_argument("--json")
    args = p.parse_args(argv)
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="drift-old-") as tmp:
        _old_packs(args.old_rev, Path(tmp))
        sets = {
            "packs now": {},
            f"packs at {args.old_rev}": {
                "PYTHONPATH": tmp,
                "FL_PATCH_PACKS": "none",
                "FL_PATCH_REGISTRY": "old_packs.cpu.registry,old_packs.flaggems.registry",
            },
        }
        for label, extra in sets.items():
            for item in args.against:
                version, source = item.split("=", 1)
                env = _env(extra)
                real = _real(str(Path(args.venvs) / version / "bin" / "python"), env)
                static, findings = _static(source, env)
                table = compare(real, static)
                results[f"{label} / {version}"] = {
                    **{k: len(v) for k, v in table.items()},
                    "hits": table["hit"],
                    "misses": table["miss"],
                    "false alarms": table["false alarm"],
                    "findings": {f"{k[0]} [{k[1]}]": v for k, v in findings.items() if static.get(k) == "error"},
                }
                row = results[f"{label} / {version}"]
                print(
                    f"{label:22} {version:8} hit {row['hit']:3}  miss {row['miss']:3}  false alarm {row['false alarm']:3}  agree {row['agree']:3}",
                    flush=True,
                )
                for kind in ("misses", "false alarms"):
                    for name in row[kind]:  # type: ignore[union-attr]
                        print(f"    {kind[:-2] if kind == 'misses' else 'false alarm'}: {name}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
