"""FlagScale's real plugin tree under fl_patch: its registrations reach fl_patch, its own tests pass.

Takes a Megatron-LM-FL checkout (a work tree, or a bare git directory and a revision),
copies its ``megatron/plugin`` (and nothing else: ``megatron`` must stay the namespace
package it shares with the installed megatron-core) into a temporary directory, and runs:

1. FlagScale's tests ``test_override_manager.py``, ``test_clip_grads.py``, ``test_utils.py``,
   ``test_platform.py``: plain ``python -m pytest`` (on a CPU-only torch megatron-core
   cannot import there: no triton) and ``python -m fl_patch -m pytest``;
2. ``python -m fl_patch --list --json``: how many of the tree's ``register()`` calls fl_patch
   received (the tree ships its own ``decorators.py``);
3. ``python -m fl_patch --check --json`` with ``XPU=1`` (FlagScale's Kunlunxin switch): the
   vendor list, and the verdict on each of the tree's registrations.

Run:  .venv/bin/python bench/flagscale_tree.py --repo /path/to/Megatron-LM-FL [--rev HEAD] [--json out.json]
Nothing of the tree is kept or committed.
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
TESTS = ("test_override_manager.py", "test_clip_grads.py", "test_utils.py", "test_platform.py")
TREE_SOURCE = "megatron.plugin.override_registry"


def _extract(repo: Path, rev: str, dest: Path) -> str:
    """Copy ``megatron/plugin`` of ``repo`` at ``rev`` into ``dest``; returns the commit."""
    git = (
        ["git", f"--git-dir={repo}"]
        if (repo / "HEAD").is_file() and not (repo / ".git").exists()
        else ["git", "-C", str(repo)]
    )
    commit = subprocess.run([*git, "rev-parse", rev], capture_output=True, text=True, check=True).stdout.strip()
    archive = subprocess.run([*git, "archive", commit, "megatron/plugin"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    assert not (dest / "megatron" / "__init__.py").exists()
    return commit


def _env(tree: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k == "MG_FL_PREFER")}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(REPO / "src")])
    env["FL_PATCH_CHILDREN"] = "0"
    env.update(extra)
    return env


def _pytest(tree: Path, under_fl_patch: bool) -> dict[str, object]:
    tests = [str(tree / "megatron" / "plugin" / "tests" / name) for name in TESTS]
    args = [
        sys.executable,
        *(["-m", "fl_patch"] if under_fl_patch else []),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    proc = subprocess.run([*args, *tests], env=_env(tree), cwd=str(tree), capture_output=True, text=True, timeout=900)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip()[-300:]
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", tail)}
    return {"exit": proc.returncode, "summary": tail, **counts}


def _cli_json(tree: Path, *args: str, **extra: str) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", *args, "--json"],
        env=_env(tree, **extra),
        cwd=str(tree),
        capture_output=True,
        text=True,
        timeout=900,
    )
    return json.loads(proc.stdout), proc.stderr  # stdout must be pure JSON even though the tree prints


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", required=True, type=Path, help="a Megatron-LM-FL checkout or bare git directory")
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        commit = _extract(args.repo.resolve(), args.rev, tree)
        plain, patched = _pytest(tree, False), _pytest(tree, True)
        listed, _ = _cli_json(tree, "--list")
        checked, _ = _cli_json(tree, "--check", XPU="1")
    received = [r for r in listed["registrations"] if r["source"] == TREE_SOURCE]
    verdicts = [
        {
            "target": r["target"],
            "vendor": r["vendor"],
            "level": r["level"],
            "findings": [f["message"] for f in r["findings"]],
        }
        for r in checked["registrations"]
        if r["source"] == TREE_SOURCE
    ]
    from importlib.metadata import version

    results = {
        "commit": commit,
        "megatron_core": version("megatron-core"),  # run the bench with a release's venv to test on it
        "tests_plain": plain,
        "tests_under_fl_patch": patched,
        "registrations_received": len(received),
        "vendors_with_XPU_1": checked["vendors"],
        "check": verdicts,
    }
    print(f"Megatron-LM-FL {commit[:12]}: megatron/plugin, on megatron-core {results['megatron_core']}")
    print(f"  FlagScale's tests, plain pytest:        {plain['summary']}")
    print(f"  FlagScale's tests, python -m fl_patch:  {patched['summary']}")
    print(f"  tree registrations fl_patch received:  {len(received)}")
    print(f"  vendors with XPU=1:                    {', '.join(checked['vendors'])}")
    for verdict in verdicts:
        note = f"  ({verdict['findings'][0][:110]})" if verdict["findings"] else ""
        print(f"    {verdict['level']:<8} [{verdict['vendor']}] {verdict['target']}{note}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if patched["exit"] == 0 and received else 1


if __name__ == "__main__":
    raise SystemExit(main())
