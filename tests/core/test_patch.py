"""What fl_patch puts at a function target (fl_patch.core.patch), on the real megatron-core (issue 43).

fl_patch installs its own function object running the impl's code, wearing upstream's face: so a
parameter the impl names differently is passed on, ``typing``/``inspect`` work on the patched name
and on the impl, the impl itself is never written on, FlagScale's ``Target.__wrapped__`` is
upstream's whatever decorates the impl, and another tool's wrapt proxy at the target is kept.
"""

from __future__ import annotations

import inspect
import json
import typing

import pytest
import torch

import fl_patch
from fl_patch import Status

from ..conftest import clean_env

DIVIDE = "megatron.core.utils.divide"
MASK = "megatron.core.transformer.utils.attention_mask_func"
IMPLS = "fltest_idioms.functions"


def _record(target: str) -> fl_patch.PatchRecord:
    (record,) = [r for r in fl_patch.report() if r.target == target]
    return record


def test_an_impl_that_names_parameters_differently_is_applied_and_keyword_calls_reach_it(megatron_core, engine) -> None:
    from megatron.core import utils
    from megatron.core.transformer import dot_product_attention
    from megatron.core.transformer import utils as transformer_utils

    fl_patch.register(DIVIDE, f"{IMPLS}.divide")
    fl_patch.register(MASK, f"{IMPLS}.attention_mask_func")
    fl_patch.install()
    assert _record(DIVIDE).status is Status.APPLIED and "numerator=a" in _record(DIVIDE).detail
    assert utils.divide(6, 3) == utils.divide(numerator=6, denominator=3) == utils.divide(6, denominator=3) == 20.0
    scores, mask = torch.zeros(2, 2), torch.tensor([[True, False], [False, True]])
    # dot_product_attention bound the name before the patch (a circular import): rebound too.
    for function in (transformer_utils.attention_mask_func, dot_product_attention.attention_mask_func):
        out = function(attention_scores=scores, attention_mask=mask)
        assert out.tolist() == [[-1000.0, 0.0], [0.0, -1000.0]]
    fl_patch.uninstall()
    assert utils.divide(numerator=6, denominator=3) == 2


def test_typing_and_inspect_work_on_the_patched_name_and_the_impl_is_never_written_on(megatron_core, engine) -> None:
    from fltest_idioms import functions
    from megatron.core import utils

    before = dict(vars(functions.divide))
    fl_patch.register(DIVIDE, f"{IMPLS}.divide")
    fl_patch.install()
    assert vars(functions.divide) == before  # no __wrapped__, no __signature__ written on the vendor's function
    assert typing.get_type_hints(functions.divide) == {"a": float, "b": float, "return": float}
    assert typing.get_type_hints(utils.divide) == typing.get_type_hints(fl_patch.original(DIVIDE))
    assert inspect.signature(utils.divide, eval_str=True) == inspect.signature(fl_patch.original(DIVIDE))
    assert str(inspect.signature(functions.divide, eval_str=True)) == "(a: float, b: float) -> float"
    assert utils.divide.__wrapped__ is fl_patch.original(DIVIDE)
    fl_patch.uninstall()
    assert vars(functions.divide) == before


def test_a_pass_through_impl_shows_upstreams_signature(megatron_core, engine) -> None:
    from fltest_idioms import functions
    from megatron.core import utils

    fl_patch.register(DIVIDE, f"{IMPLS}.anything")
    fl_patch.install()
    assert str(inspect.signature(utils.divide)) == "(numerator, denominator)"
    assert utils.divide(6, 3) == 2
    # Names that match: the impl's own code runs at the target, with nothing in between.
    assert utils.divide.__code__ is functions.anything.__code__ and utils.divide is not functions.anything


def test_a_decorated_impl_reaching_upstream_through_wrapped_does_not_recurse(megatron_core, engine) -> None:
    from megatron.core import utils

    fl_patch.register(DIVIDE, f"{IMPLS}.divide_no_grad")
    fl_patch.install()
    assert utils.divide(6, 3) == 3  # upstream's 2, plus one
    assert utils.divide.__wrapped__ is fl_patch.original(DIVIDE)


@pytest.mark.slow
def test_an_instrumentation_proxy_at_the_target_is_kept_around_the_impl(run_python) -> None:
    code = (
        "import fl_patch\n"
        f"fl_patch.register({DIVIDE!r}, {IMPLS + '.divide'!r})\n"
        "import runpy; runpy.run_module('fltest_idioms.wrapt_hooked', run_name='__main__')\n"
    )
    proc = run_python("-m", "fl_patch", "-c", code, env=clean_env(FL_PATCH_PACKS="cpu"))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # The agent's wrapper still sees the call, and the impl computes it.
    assert out == {"result": 20.0, "seen": 1, "status": "applied", "proxy": True}
