"""The first ``register()`` in the main thread while another thread makes the first megatron import."""

import threading


def importer() -> None:
    import megatron.core.utils  # noqa: F401


thread = threading.Thread(target=importer)
thread.start()
import fl_patch  # noqa: E402

fl_patch.register("megatron.core.utils.divide", "fltest_idioms.functions.anything")
thread.join()
import megatron.core.utils as utils  # noqa: E402

print("ok" if utils.divide(6, 3) == 2 else "wrong")
