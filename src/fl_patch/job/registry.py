"""fl_patch's own registration: the rank check on torch's process-group creation (``rank_check.py``).

Loaded with the packs, at the first megatron import, whatever ``FL_PATCH_PACKS`` names
(the check is about the job, not about a pack); ``FL_PATCH_RANK_CHECK=off`` leaves it out.
"""

from fl_patch import register
from fl_patch.job.rank_check import TARGET

register(target=TARGET, impl="fl_patch.job.rank_check.new_process_group_helper")
