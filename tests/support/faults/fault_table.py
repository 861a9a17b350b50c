"""The fault table: every way a plugin can break, one row each, for the tests and the bench.

``tests/scenarios/test_faults.py`` runs the registration faults in-process against the real
megatron-core this pytest process imported (``in_process=True``); ``bench/fault_matrix.py``
runs every row for real, as a program under ``python -m fl_patch``, in default and in
strict mode, and tallies what was lost silently. One table, so the two cannot drift.

A row's ``registry`` is the body of a registry module (or empty when the fault lies in the
environment); ``names`` are what the one warning (default) or error (strict) must contain;
``program`` is what the bench runs, which prints ``PROGRAM-OK`` only if upstream code ran.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DIVIDE", "FAULTS", "PROGRAM", "Fault"]

PROGRAM = """
import sys
from megatron.core import utils
from megatron.core.optimizer import clip_grads, optimizer
from megatron.core import optimizer_param_scheduler
assert utils.divide(6, 3) == 2, "upstream divide did not run"
assert clip_grads.get_grad_norm_fp32.__module__ == "megatron.core.optimizer.clip_grads"
assert optimizer_param_scheduler.OptimizerParamScheduler.__module__ == "megatron.core.optimizer_param_scheduler"
print("PROGRAM-OK")
"""

# megatron-core's multi_latent_attention.py imports this module inside a bare try/except.
MLA_PROGRAM = """
import megatron.core.transformer.multi_latent_attention as mla
from megatron.core.fusions import fused_mla_yarn_rope_apply as rope
assert rope.fused_apply_mla_rope_for_q.__module__ == rope.__name__
print("PROGRAM-OK")
"""

NAMEDTUPLE_PROGRAM = """
from megatron.core.rerun_state_machine import Caller
assert Caller("m", 0).message == "m", "the NamedTuple field was replaced"
print("PROGRAM-OK")
"""

DIVIDE = "megatron.core.utils.divide"
ENSURE = "megatron.core.utils.ensure_divisibility"
SCHEDULER = "megatron.core.optimizer_param_scheduler.OptimizerParamScheduler"
GRAD_NORM = "megatron.core.optimizer.clip_grads.get_grad_norm_fp32"
MLA_ROPE_Q = "megatron.core.fusions.fused_mla_yarn_rope_apply.fused_apply_mla_rope_for_q"
CALLER_MESSAGE = "megatron.core.rerun_state_machine.Caller.message"


@dataclass(frozen=True)
class Fault:
    name: str
    registry: str  # body of the registry module; '' when the fault is in the environment
    names: tuple[str, ...]  # the warning / error must contain each
    status: str | None = None  # report() status of the registration ("impl failed", ...), if one
    cause: str = ""  # a regular expression the message and the record's detail match
    env: tuple[tuple[str, str], ...] = ()
    program: str = PROGRAM
    in_process: bool = False  # tests/scenarios/test_faults.py runs it in its own process, megatron loaded
    target: str | None = None
    impl: str | None = None


def _one(name: str, target: str, impl: str, status: str, cause: str, program: str = PROGRAM) -> Fault:
    return Fault(
        name,
        f"from fl_patch import register\nregister({target!r}, {impl!r})\n",
        (target, impl),
        status,
        cause,
        program=program,
        in_process=program is PROGRAM,
        target=target,
        impl=impl,
    )


FAULTS: list[Fault] = [
    _one(
        "impl module raises ImportError",
        DIVIDE,
        "fltest_broken.import_error.impl",
        "impl failed",
        "ModuleNotFoundError: No module named 'fltest_no_such_dependency'",
    ),
    _one(
        "impl module has a SyntaxError",
        DIVIDE,
        "fltest_broken.syntax_error.impl",
        "impl failed",
        r"SyntaxError: .*syntax_error\.py",
    ),
    _one(
        "impl module raises at import",
        DIVIDE,
        "fltest_broken.raises_at_import.impl",
        "impl failed",
        "RuntimeError: vendor library initialisation failed",
    ),
    _one(
        "impl module calls sys.exit at import",
        GRAD_NORM,
        "hostile.exits_at_import.get_grad_norm_fp32",
        "impl failed",
        "SystemExit: 0",
    ),
    _one(
        "impl attribute missing",
        DIVIDE,
        "fltest_broken.usable.no_such_impl",
        "impl failed",
        "AttributeError: module 'fltest_broken.usable' has no attribute 'no_such_impl'",
    ),
    _one(
        "impl not callable",
        DIVIDE,
        "fltest_broken.usable.NOT_CALLABLE",
        "impl failed",
        "the target is a function, the impl is not callable",
    ),
    _one(
        "target module missing",
        "megatron.core.optimizer.no_such_module.get_grad_norm_fp32",
        "fltest_broken.usable.impl",
        "target missing",
        "module megatron.core.optimizer has no attribute or submodule 'no_such_module'",
    ),
    _one(
        "target attribute renamed",
        "megatron.core.optimizer.clip_grads.get_grad_norm",
        "fltest_broken.usable.impl",
        "target missing",
        r"module megatron.core.optimizer.clip_grads has no attribute 'get_grad_norm'",
    ),
    _one(
        "target class missing",
        "megatron.core.optimizer.optimizer.MixedPrecisionOptimizerV2.step",
        "fltest_broken.usable.impl",
        "target missing",
        "module megatron.core.optimizer.optimizer has no attribute 'MixedPrecisionOptimizerV2'",
    ),
    _one(
        "class replacement does not subclass",
        SCHEDULER,
        "fltest_broken.usable.NotASubclass",
        "impl failed",
        "does not subclass megatron.core.optimizer_param_scheduler.OptimizerParamScheduler",
    ),
    _one(
        "target is a NamedTuple field",
        CALLER_MESSAGE,
        "fltest_broken.usable.impl",
        "impl failed",
        "named-tuple field",
        program=NAMEDTUPLE_PROGRAM,
    ),
    _one(
        "strict error inside upstream's try/except",
        MLA_ROPE_Q,
        "fltest_broken.import_error.impl",
        "impl failed",
        "fltest_no_such_dependency",
        program=MLA_PROGRAM,
    ),
    Fault(
        "impls form a cycle",
        f"from fl_patch import register\nregister({DIVIDE!r}, {ENSURE!r})\nregister({ENSURE!r}, {DIVIDE!r})\n",
        (f"form a cycle ({DIVIDE} -> {ENSURE} -> {DIVIDE})", "none of them is patched"),
        "impl failed",
        "form a cycle",
    ),
    Fault(
        "registry module fails to import",
        "",
        ("fltest_broken.registry_raises", "missing vendor SDK"),
        env=(("FL_PATCH_REGISTRY", "fltest_broken.registry_raises"),),
    ),
    Fault(
        "registry module runs argparse at import (SystemExit)",
        "",
        ("hostile.registry_argparse", "SystemExit: 2"),
        env=(("FL_PATCH_REGISTRY", "hostile.registry_argparse"),),
        program="import sys\nsys.argv[1:] = ['--steps', '3']\n" + PROGRAM,
    ),
    Fault(
        "broken entry point",
        "",
        ("fltest_broken.registry_missing_module", "ModuleNotFoundError"),
        env=(("FL_PATCH_ENTRY_POINTS", "1"),),
    ),
    Fault(
        "unknown vendor in MG_FL_PREFER",
        f"from fl_patch import register\nregister({DIVIDE!r}, 'fltest_broken.usable.impl', vendor='musa')\n",
        ("MG_FL_PREFER", "'kunlunxin'"),
        env=(("MG_FL_PREFER", "kunlunxin"),),
    ),
]
