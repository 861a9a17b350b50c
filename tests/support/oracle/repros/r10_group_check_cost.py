"""Every process group creation walks every registration: the rank check's cost grows with the registrations.

Run: python -m fl_patch tests/support/oracle/repros/r10_group_check_cost.py   (exit 1: the defect is there)

``job/rank_check.py`` ``_checked`` runs at each ``torch.distributed.new_group`` and asks
``job/digest.py`` ``patch_state`` for this process's state; ``patch_state`` caches the state, but its
cache key is built from ``fl_patch.report()``, which ``engine/engine.py`` ``records`` computes afresh
for every target (``core/target.py`` ``records``: selection, vendor, ``is_in_place``). With the oracle's
6,038 registrations that is ~0.11 s of CPU per group; megatron's ``initialize_model_parallel`` creates
23 groups (~3 s), and Megatron-LM's unit tests, which initialise per test, run 3-6x slower with the
oracle than without (``docs/oracle_unit_ws1.json``). No result changes.

This file registers 3,000 targets (of a module never imported: each stays ``waiting``, as most of the
oracle's do) and counts the records ``fl_patch.report()`` builds per group created.
"""

import os
import sys

import fl_patch

N = 3000
GROUPS = 10

if __name__ == "__main__":
    for i in range(N):
        fl_patch.register(f"r10_never_imported.module.f{i}", f"r10_never_imported.impls:f{i}")
    import megatron.core.parallel_state  # noqa: F401  (a megatron program: fl_patch's rank check is in place)
    import torch.distributed as dist

    built = [0]
    report = fl_patch.report

    def counting_report() -> list[fl_patch.PatchRecord]:
        records = report()
        built[0] += len(records)
        return records

    fl_patch.report = counting_report  # type: ignore[assignment]  (the rank check reads it as fl_patch.report)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("gloo", rank=0, world_size=1)
    built[0] = 0
    for _ in range(GROUPS):
        dist.new_group([0], backend="gloo")
    dist.destroy_process_group()
    per_group = built[0] / GROUPS
    if per_group >= N:
        print(f"DEFECT: {per_group:.0f} records built per new_group with {N} registrations (report() on every group)")
        sys.exit(1)
    print(f"OK: {per_group:.0f} records built per new_group with {N} registrations")
