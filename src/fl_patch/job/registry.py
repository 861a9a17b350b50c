"""fl_patch's own registration: the rank check on torch's process-group creation (``rank_check.py``).

Loaded with the packs, at the first megatron import, whatever ``FL_PATCH_PACKS`` names
(the check is about the job, not about a pack); ``FL_PATCH_RANK_CHECK=off`` leaves it out.
"""

from fl_patch import PatchDoc, register
from fl_patch.job.rank_check import TARGET

RANK_CHECK = PatchDoc(
    why="ranks of one job that run different patches (one rank a vendor's kernel, another upstream's: a node "
    "without the plugin) give wrong gradients or hang in a collective, and nothing says why.",
    how="around the one function that creates every process group, each member publishes the digest of its patch "
    "state in the group's store and compares; different ones stop every member there, before any collective, with "
    "one table of what differs (job/rank_check.py).",
    upstream="torch 2.13 torch/distributed/distributed_c10d.py (_new_process_group_helper: torch has no public hook "
    "for process-group creation)",
    remove_when="torch offers a public hook at process-group creation (the check moves there), or fl_patch no longer "
    "patches per process",
)

register(target=TARGET, impl="fl_patch.job.rank_check.new_process_group_helper", doc=RANK_CHECK)
