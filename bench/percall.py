"""Per-call overhead of a patched target, against the other ways to patch.

For each kind of target (module function, method, staticmethod, classmethod, class
instantiation) on real megatron-core, the same trivial impl is reached five ways,
called through the upstream name the way megatron's own callers do:

* ``direct``: the impl called directly (the floor);
* ``fl_patch``: installed by fl_patch (the impl itself sits in the upstream place);
* ``overridable``: an ``@overridable``-style decorator that looks the impl up in a
  registry dict on every call, as FlagScale's does (written here from its description);
* ``wrapt``: a ``wrapt.FunctionWrapper`` around the original that calls the impl;
* ``closure``: a plain ``functools.wraps`` closure that calls the impl.

Each figure is a ratio to ``direct`` measured in the same process, interleaved,
median over many repetitions (these machines are noisy).

Run:  .venv/bin/python bench/percall.py [--repeat 41] [--number 20000] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

import wrapt

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("FL_PATCH_PACKS", "cpu")

import fl_patch  # noqa: E402

fl_patch.install()
import megatron.core.optimizer.optimizer as optimizer_module  # noqa: E402
import megatron.core.utils as utils_module  # noqa: E402
from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer  # noqa: E402
from megatron.core.optimizer.optimizer import MegatronOptimizer  # noqa: E402
from megatron.core.process_groups_config import ProcessGroupCollection  # noqa: E402


# ---------------------------------------------------------------- the impls (trivial on purpose)
def impl_function(numerator, denominator):
    return numerator


def impl_method(self):
    return self


def impl_static(state_dict):
    return state_dict


def impl_class(cls, tensor):
    return cls


class ImplScheduler(ProcessGroupCollection):
    pass


# ---------------------------------------------------------------- FlagScale-style dispatch
_REGISTRY: dict[str, Callable] = {}


def overridable(func: Callable) -> Callable:
    """Dispatch on every call through a dict keyed by FlagScale's method_key."""
    qualname = func.__qualname__.split(".")
    key = (
        f"{qualname[-2]}.{qualname[-1]}"
        if len(qualname) > 1
        else f"{func.__module__.rsplit('.', 1)[-1]}.{func.__name__}"
    )

    @functools.wraps(func)
    def dispatch(*args, **kwargs):
        impl = _REGISTRY.get(key)
        if impl is not None:
            return impl(*args, **kwargs)
        return func(*args, **kwargs)

    dispatch._fl_key = key  # type: ignore[attr-defined]
    return dispatch


def _closure(original: Callable, impl: Callable) -> Callable:
    @functools.wraps(original, updated=())
    def wrapper(*args, **kwargs):
        return impl(*args, **kwargs)

    return wrapper


def _wrapt(original: Callable, impl: Callable) -> Callable:
    def wrapper(wrapped: Callable, instance: object, args: tuple, kwargs: dict) -> object:
        return impl(*args, **kwargs) if instance is None else impl(instance, *args, **kwargs)

    return wrapt.FunctionWrapper(original, wrapper)


# ---------------------------------------------------------------- the cases
class Case:
    """One kind of target: how to install each variant, and the call to time."""

    def __init__(self, name: str, target: str, impl: Callable, call: str, setup_globals: dict) -> None:
        self.name, self.target, self.impl, self.call, self.globals = name, target, impl, call, setup_globals


def _function_case() -> tuple[Case, dict[str, Callable[[], Callable[[], None]]]]:
    original = utils_module.divide
    target = "megatron.core.utils.divide"

    def use(value: Callable) -> Callable[[], None]:
        def undo() -> None:
            utils_module.divide = original

        utils_module.divide = value
        return undo

    def with_fl_patch() -> Callable[[], None]:
        fl_patch.register(target, impl_function)
        fl_patch.install()
        return fl_patch.uninstall

    variants = {
        "direct": lambda: use(impl_function),
        "fl_patch": with_fl_patch,
        "overridable": lambda: (_REGISTRY.__setitem__("utils.divide", impl_function), use(overridable(original)))[1],
        "wrapt": lambda: use(_wrapt(original, impl_function)),
        "closure": lambda: use(_closure(original, impl_function)),
    }
    return Case("module function", target, impl_function, "m.divide(6, 3)", {"m": utils_module}), variants


def _class_attr_case(
    name: str, owner: type, attr: str, impl: Callable, wrap_kind: Callable[[Callable], object], call: str, globs: dict
) -> tuple[Case, dict[str, Callable[[], Callable[[], None]]]]:
    raw = vars(owner)[attr]
    target = f"{owner.__module__}.{owner.__qualname__}.{attr}"
    original = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw

    def use(value: Callable) -> Callable[[], None]:
        setattr(owner, attr, wrap_kind(value))
        return lambda: setattr(owner, attr, raw)

    def with_fl_patch() -> Callable[[], None]:
        fl_patch.register(target, impl)
        fl_patch.install()
        return fl_patch.uninstall

    variants = {
        "direct": lambda: use(impl),
        "fl_patch": with_fl_patch,
        "overridable": lambda: (_REGISTRY.__setitem__(f"{owner.__name__}.{attr}", impl), use(overridable(original)))[1],
        "wrapt": lambda: use(_wrapt(original, impl)),
        "closure": lambda: use(_closure(original, impl)),
    }
    return Case(name, target, impl, call, globs), variants


def _class_case() -> tuple[Case, dict[str, Callable[[], Callable[[], None]]]]:
    import megatron.core.process_groups_config as pgc

    original = pgc.ProcessGroupCollection
    target = "megatron.core.process_groups_config.ProcessGroupCollection"

    def use(value: object) -> Callable[[], None]:
        pgc.ProcessGroupCollection = value  # type: ignore[misc]
        return lambda: setattr(pgc, "ProcessGroupCollection", original)

    def with_fl_patch() -> Callable[[], None]:
        fl_patch.register(target, ImplScheduler)
        fl_patch.install()
        return fl_patch.uninstall

    def overridable_class() -> Callable[[], None]:
        # FlagScale's decorator on a class dispatches at instantiation time.
        _REGISTRY["process_groups_config.ProcessGroupCollection"] = ImplScheduler

        @functools.wraps(original, updated=())
        def factory(*args, **kwargs):
            cls = _REGISTRY.get("process_groups_config.ProcessGroupCollection", original)
            return cls(*args, **kwargs)

        return use(factory)

    variants = {
        "direct": lambda: use(ImplScheduler),
        "fl_patch": with_fl_patch,
        "overridable": overridable_class,
        "wrapt": lambda: use(_wrapt(original, ImplScheduler)),
        "closure": lambda: use(_closure(original, ImplScheduler)),
    }
    return Case("class instantiation", target, ImplScheduler, "m.ProcessGroupCollection()", {"m": pgc}), variants


def cases() -> list[tuple[Case, dict[str, Callable[[], Callable[[], None]]]]]:
    instance = object.__new__(optimizer_module.Float16OptimizerWithFloat16Params)
    return [
        _function_case(),
        _class_attr_case(
            "method",
            optimizer_module.MixedPrecisionOptimizer,
            "_unscale_main_grads_and_check_for_nan",
            impl_method,
            lambda f: f,
            "o._unscale_main_grads_and_check_for_nan()",
            {"o": instance},
        ),
        _class_attr_case(
            "staticmethod",
            MegatronOptimizer,
            "_extract_common_per_param_step",
            impl_static,
            staticmethod,
            "o._extract_common_per_param_step(None)",
            {"o": instance},
        ),
        _class_attr_case(
            "classmethod",
            DistributedOptimizer,
            "_is_distopt_quantized_param",
            impl_class,
            classmethod,
            "c._is_distopt_quantized_param(None)",
            {"c": DistributedOptimizer},
        ),
        _class_case(),
    ]


def measure(repeat: int, number: int) -> list[dict[str, object]]:
    rows = []
    for case, variants in cases():
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(repeat):
            for name, install in variants.items():  # interleaved: drift hits every variant alike
                undo = install()
                try:
                    timer = timeit.Timer(case.call, globals=case.globals)
                    samples[name].append(timer.timeit(number) / number)
                finally:
                    undo()
                    _REGISTRY.clear()
                    fl_patch.activation.install._reset_for_tests()
        floor = statistics.median(samples["direct"])
        rows.append(
            {
                "case": case.name,
                "direct_ns": floor * 1e9,
                **{f"{name}_ratio": statistics.median(values) / floor for name, values in samples.items()},
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=41)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--json")
    args = parser.parse_args()
    fl_patch.activation.install._reset_for_tests()
    rows = measure(args.repeat, args.number)
    print("| target kind | direct call | fl_patch | @overridable dispatch | wrapt.FunctionWrapper | closure |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['case']} | {row['direct_ns']:.0f} ns | {row['fl_patch_ratio']:.3f}x | {row['overridable_ratio']:.3f}x"
            f" | {row['wrapt_ratio']:.3f}x | {row['closure_ratio']:.3f}x |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
