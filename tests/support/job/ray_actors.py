"""Ray actors for tests/job/test_ray.py: a probe, and a trainer that runs examples/train_gpt.py at TP=2 in its worker.

A module the cluster's workers import by name (the cluster's PYTHONPATH has this directory),
as a real job's worker code is installed on its nodes.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

import ray

REPO = Path(__file__).resolve().parents[3]


def _state() -> dict[str, Any]:
    fl = sys.modules.get("fl_patch")
    return {
        "pid": os.getpid(),
        "fl_patch_imported": fl is not None,
        "active": bool(fl is not None and fl.is_active()),
        "bootstrap_on_pythonpath": any(
            e.rstrip("/").endswith("fl_patch/activation/bootstrap") for e in os.environ.get("PYTHONPATH", "").split(":")
        ),
        "user_var": os.environ.get("JOB_USER_VAR"),
        "user_hook": os.environ.get("JOB_USER_HOOK"),
        "rank_env": os.environ.get("RANK"),
    }


@ray.remote(num_cpus=1)
class Probe:
    def state(self) -> dict[str, Any]:
        return _state()


class Trainer:
    """Trains upstream megatron-core's GPT (examples/train_gpt.py) as one rank of a gloo group of actors."""

    def __init__(
        self, rank: int | None = None, world: int | None = None, master: tuple[str, int] | None = None
    ) -> None:
        # Given explicitly (plain actors), or already in the environment (a veRL-style worker group's env_vars).
        if rank is not None:
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0")
            os.environ.update(MASTER_ADDR=master[0], MASTER_PORT=str(master[1]))  # type: ignore[index]
        os.environ.setdefault("LOCAL_RANK", "0")

    def state(self) -> dict[str, Any]:
        return _state()

    def train(self, steps: int, log_dir: str) -> dict[str, Any]:
        log = Path(log_dir) / f"rank{os.environ['RANK']}.jsonl"
        module = runpy.run_path(str(REPO / "examples" / "train_gpt.py"), run_name="train_gpt_in_actor")
        argv = ["--tp", "2", "--steps", str(steps), "--quiet", "--num-layers", "1", "--log-file", str(log)]
        import fl_patch

        try:
            module["main"](argv)
        except fl_patch.FlPatchError as exc:  # the rank check's: its message is what the test reads
            return {"error": f"{type(exc).__name__}: {exc}", **_state()}

        checks = [
            r
            for r in fl_patch.report()
            if r.target.endswith("_new_process_group_helper") and r.vendor == r.chosen_vendor
        ]
        losses = [json.loads(line)["loss"] for line in log.read_text().splitlines()] if log.exists() else []
        return {
            "losses": losses,
            "check": checks[0].status.value if checks else None,
            "installed": fl_patch.is_installed(),
            **_state(),
        }


RemoteTrainer = ray.remote(num_cpus=1)(Trainer)


@ray.remote(num_cpus=0)
class RegisterCenter:
    """Rank 0 of a worker group publishes its address here; the other ranks read it (veRL's pattern)."""

    def __init__(self) -> None:
        self.info: dict[str, str] = {}

    def set(self, info: dict[str, str]) -> None:
        self.info = info

    def get(self) -> dict[str, str]:
        return self.info
