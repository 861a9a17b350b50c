"""Running the demo (and Megatron-LM's pretrain_gpt.py) under compare mode, for the tests: the command, the records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "train_gpt.py"
MY_PLUGIN = REPO / "examples" / "my_plugin"
HERE = Path(__file__).resolve().parent
# The demo's architecture flags that reach every planted target (RMSNorm, SwiGLU, the softmax's scale).
PLANTED_ARCHITECTURE = ("--normalization", "RMSNorm", "--swiglu", "--apply-query-key-layer-scaling")


def env(**extra: str) -> dict[str, str]:
    """The test environment (no fl_patch variables), with the repo, this directory and my_plugin importable."""
    clean = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k == "MG_FL_PREFER")}
    clean["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(HERE), str(MY_PLUGIN)])
    clean["PYTHONWARNINGS"] = "ignore::UserWarning:megatron,ignore:Transformer Engine and Apex:UserWarning"
    clean.update(extra)
    return clean


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    lines: list[dict] = field(default_factory=list)  # one JSON line per process

    def records(self, rank: str | None = None) -> dict[str, dict]:
        """The records of one process (the only one, or ``rank``'s) by target."""
        chosen = [line for line in self.lines if rank is None or line["rank"] == rank]
        assert len(chosen) == 1, [line["rank"] for line in self.lines]
        return {record["target"]: record for record in chosen[0]["records"]}


def fl_patch(tmp_path: Path, *words: str, timeout: float = 300, **extra_env: str) -> Run:
    """``python -m fl_patch --compare-json F words...`` (words: fl_patch options, then the program and its own)."""
    records = tmp_path / "compare.jsonl"
    records.unlink(missing_ok=True)
    command = [sys.executable, "-m", "fl_patch", "--compare-json", str(records), *words]
    proc = subprocess.run(command, env=env(**extra_env), cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    return Run(proc.returncode, proc.stdout, proc.stderr, lines)
