"""The job, not the process: the same patches on every rank, every Ray actor and every node.

- ``digest``: a rank's patch state as rows (versions, modes, the vendor and impl of each target) and their digest;
- ``rank_check``: every member of a process group compares its state as the group is created;
- ``merge``: per-rank records merged (shared rows once, differences per rank), for the rank check,
  the exit report and any other per-rank table;
- ``report``: ``--report`` under a launcher, one merged view through the job's store;
- ``ranks``: the rank as each launcher says it (torchrun, srun, mpirun, PMI);
- ``ray``: a runtime_env that gives Ray workers the driver's fl_patch; ``ray_watch``: a driver that starts actors
  without it is told once.

Nothing here is imported by fl_patch's core; it uses the public API (``fl_patch.report()``) and the settings.
"""
