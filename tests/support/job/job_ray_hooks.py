"""A user's own Ray worker_process_setup_hook (by module path): fl_patch's hook runs it after arming fl_patch."""

import os


def user_hook() -> None:
    os.environ["JOB_USER_HOOK"] = "ran"
