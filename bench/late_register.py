"""What one ``register()`` costs after megatron-core has loaded (the late path).

In a fresh process: ``fl_patch.install()``, import megatron-core's training modules, then register
N new targets one call at a time (real megatron-core functions, each a new target; impls that take
any call) for N = 1, 50, 200, and print the milliseconds per ``register()`` (mean and median), the
number of modules in ``sys.modules`` and of registrations. Each register applies at once (its
module is loaded), so what is measured is the whole late application.

Run:  .venv/bin/python bench/late_register.py [--profile]
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
import types
import warnings

warnings.simplefilter("ignore")

IMPORTS = """
import megatron.core
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.distributed import DistributedDataParallel
from megatron.core.optimizer import get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func
"""


def _impl(*args: object, **kwargs: object) -> None:
    return None


def _candidates() -> list[str]:
    """Module-level functions defined in loaded megatron-core modules, as target paths."""
    found = []
    for name, module in sorted(sys.modules.items()):
        if not name.startswith("megatron.core") or not isinstance(module, types.ModuleType):
            continue
        for attr, value in sorted(vars(module).items()):
            if inspect.isfunction(value) and value.__module__ == name and not attr.startswith("_"):
                found.append(f"{name}.{attr}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="cProfile the N=50 round")
    args = parser.parse_args()
    import fl_patch

    fl_patch.install()
    exec(IMPORTS, {})
    candidates = iter(_candidates())
    print(f"modules loaded: {len(sys.modules)}; registrations before: {len(fl_patch.report())}")
    for n in (1, 50, 200):
        targets = [next(candidates) for _ in range(n)]
        profiler = None
        if args.profile and n == 50:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        times = []
        for target in targets:
            start = time.perf_counter()
            fl_patch.register(target=target, impl=_impl, vendor="default")
            times.append((time.perf_counter() - start) * 1000)
        if profiler is not None:
            import pstats

            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        print(
            f"N={n:4d}: {statistics.mean(times):8.3f} ms/register (median {statistics.median(times):.3f}), "
            f"total {sum(times):9.1f} ms; modules loaded {len(sys.modules)}"
        )


if __name__ == "__main__":
    main()
