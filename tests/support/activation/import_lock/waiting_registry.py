"""A registry module that waits on a worker thread which imports (loaded at the first megatron import)."""

import threading

from fl_patch import register


def _probe() -> None:
    import csv  # noqa: F401
    import json  # noqa: F401

    import megatron.core.utils  # noqa: F401  (the package whose import is loading this registry)


_worker = threading.Thread(target=_probe)
_worker.start()
_worker.join()
register("megatron.core.utils.divide", "fltest_idioms.functions.anything")
