"""A Ray driver for tests/job/test_ray.py: ``python -m fl_patch ray_job.py ADDRESS MODE OUT.json [LOG_DIR]``.

MODE: ``local`` (no address: this driver starts its own cluster; a probe), ``plain`` (no runtime_env: two probes), ``fl`` (fl_patch's runtime_env merged into the user's;
two trainers at TP=2), ``verl`` (the same through a veRL-style worker group: a placement group,
per-actor env_vars with RANK / MASTER_ADDR, rank 0's address through a named register center),
``odd`` (as ``fl``, rank 1's actor with FL_PATCH_DISABLE set: other patches).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile

import ray
from ports import free_port  # (tests/support: on the PYTHONPATH test_ray gives the driver)
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from ray_actors import Probe, RegisterCenter, RemoteTrainer

import fl_patch.job.ray as fl_ray

address, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
log_dir = sys.argv[4] if len(sys.argv) > 4 else "."
STEPS = 3
ODD = {"FL_PATCH_DISABLE": "megatron.core.optimizer.optimizer.Float16OptimizerWithFloat16Params.__init__"}


user_env = {"env_vars": {"JOB_USER_VAR": "kept"}, "worker_process_setup_hook": "job_ray_hooks.user_hook"}
if mode == "local":  # this driver starts the cluster itself: its raylet, so its workers, inherit its environment
    temp = tempfile.mkdtemp(prefix="rjl_", dir="/tmp")  # short: Ray's unix socket paths must fit
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp)
    result = {"states": ray.get([Probe.remote().state.remote()])}
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
elif mode == "plain":
    ray.init(address=address, runtime_env=user_env)
    probes = [Probe.remote() for _ in range(2)]
    result = {"states": ray.get([p.state.remote() for p in probes])}
else:
    ray.init(address=address, runtime_env=fl_ray.runtime_env(user_env))
    if mode in ("fl", "odd"):
        master = ("127.0.0.1", free_port())
        trainers = [
            RemoteTrainer.options(runtime_env={"env_vars": ODD} if (mode == "odd" and rank == 1) else None).remote(
                rank, 2, master
            )
            for rank in range(2)
        ]
    else:  # verl: a worker group as veRL's RayWorkerGroup builds one
        group = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
        ray.get(group.ready())
        center = RegisterCenter.options(name="job46_register_center").remote()
        ray.get(center.set.remote({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}))
        trainers = []
        for rank in range(2):
            info = ray.get(ray.get_actor("job46_register_center").get.remote())
            env_vars = {"WORLD_SIZE": "2", "RANK": str(rank), "WG_PREFIX": "job46", "WG_BACKEND": "ray", **info}
            trainers.append(
                RemoteTrainer.options(
                    runtime_env={"env_vars": env_vars},
                    name=f"job46Trainer_0:{rank}",
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=group, placement_group_bundle_index=rank
                    ),
                ).remote()
            )
    result = {"states": ray.get([t.state.remote() for t in trainers])}
    result["train"] = ray.get([t.train.remote(STEPS, log_dir) for t in trainers])
with open(out, "w") as handle:
    json.dump(result, handle)
print("DRIVER done", flush=True)
