"""Compare mode's parts that need no training run: verdicts, the wrapper's contract, records, options, step logs.

The runs on real megatron are in ``tests/compare/test_planted.py`` (the planted wrong impls are flagged),
``tests/compare/test_packs.py`` (no false alarm on the shipped packs; the program's numbers unchanged; ranks) and
``tests/compare/test_run.py`` (the whole-run compare).
"""

from __future__ import annotations

import itertools
import math
import types

import pytest
import torch

import fl_patch
from fl_patch import cli
from fl_patch.compare import wrapper
from fl_patch.compare.metrics import diff_leaf
from fl_patch.compare.results import RESULTS, merge
from fl_patch.compare.run import first_parting, read_log_steps, side_by_side
from fl_patch.config.settings import DEFAULT_COMPARE_CALLS, ENV, Settings, compare_calls, unrecognised_values
from fl_patch.core.resolve import Kind


# ------------------------------------------------------------------------------------------- verdicts
def _rounded(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype).to(torch.float32).to(dtype)


def test_the_same_result_matches_and_rounding_of_the_dtype_matches() -> None:
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    same = diff_leaf("output", x, x.clone())
    assert same is not None and not same.differs and same.max_abs == 0.0 and same.cosine == 1.0
    # a bfloat16 kernel that rounds one step differently (one ulp of bfloat16 on every element)
    ours = x.to(torch.bfloat16)
    theirs = (x * (1 + 2**-8)).to(torch.bfloat16)
    rounding = diff_leaf("output", ours, theirs)
    assert rounding is not None and not rounding.differs and rounding.max_abs > 0
    # float32 summation order (a different reduction tree): relative 1e-7
    summed = diff_leaf("output", x @ x.T, (x.double() @ x.double().T).float())
    assert summed is not None and not summed.differs


def test_wrong_results_differ_even_when_their_values_are_tiny() -> None:
    """msprobe passes anything whose max absolute error is below 0.001; a 0.02-std activation with its sign
    flipped would pass that. Here it differs."""
    x = 1e-4 * torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    flipped = diff_leaf("output", -x, x)
    assert flipped is not None and flipped.differs and flipped.max_abs < 1e-3
    logits = 0.1 * torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(2))
    unscaled = diff_leaf("output", torch.softmax(logits, -1), torch.softmax(2 * logits, -1))
    assert unscaled is not None and unscaled.differs and unscaled.cosine is not None and unscaled.cosine > 0.99


def test_exact_types_structure_and_non_finite_values() -> None:
    mask = torch.triu(torch.ones(8, 8), diagonal=1).bool()
    shifted = diff_leaf("output", torch.triu(torch.ones(8, 8), diagonal=2).bool(), mask)
    assert shifted is not None and shifted.differs and "7 of 64 elements not equal" in shifted.cause
    assert not diff_leaf("output", torch.arange(5), torch.arange(5)).differs  # type: ignore[union-attr]
    nan = torch.tensor([1.0, math.nan, 3.0])
    assert not diff_leaf("output", nan, nan.clone()).differs  # type: ignore[union-attr]
    moved = diff_leaf("output", nan, torch.tensor([math.nan, 1.0, 3.0]))
    assert moved is not None and moved.differs and "inf/nan" in moved.cause
    assert diff_leaf("output", torch.ones(2, 3), torch.ones(3, 2)).differs  # type: ignore[union-attr]
    dtype = diff_leaf("output", torch.ones(2), torch.ones(2, dtype=torch.bfloat16))
    assert dtype is not None and dtype.differs and "dtype float32 where upstream gives bfloat16" in dtype.cause
    missing = diff_leaf("grad of param weight", None, torch.ones(3))
    assert missing is not None and missing.differs and "None where upstream gives a tensor" in missing.cause
    assert diff_leaf("output", 2.0, 2.0 + 1e-12).differs is False  # type: ignore[union-attr]
    assert diff_leaf("output", 3, 4).differs  # type: ignore[union-attr]
    assert diff_leaf("output", "a", "b") is None  # nothing numerical to compare


# ------------------------------------------------------------------------------------------- the wrapper
@pytest.fixture
def compare_on() -> types.SimpleNamespace:
    RESULTS.reset()
    wrapper.configure(3)
    yield types.SimpleNamespace(results=RESULTS)
    RESULTS.reset()


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0


def _scaled_wrong(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0 + 1.0


def test_the_wrapper_is_a_plain_function_and_only_calls_the_impl_while_torch_compile_traces(compare_on) -> None:
    wrapped = wrapper.wrap_function("synthetic.scale", _scaled_wrong, _scaled, Kind.FUNCTION)
    assert isinstance(wrapped, types.FunctionType) and wrapped is not _scaled_wrong
    assert not hasattr(wrapped, "__wrapped__")  # (the engine names it and sets __wrapped__: core.patch)

    def program(x: torch.Tensor) -> torch.Tensor:
        return wrapped(x) + 1

    compiled = torch.compile(program, backend="eager", fullgraph=True)  # fullgraph: a graph break would raise
    assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 4.0))
    assert RESULTS.by_target["synthetic.scale"].seen == 0  # traced: nothing compared, no budget spent
    with pytest.warns(UserWarning, match="synthetic.scale .* differs from upstream at call 1"):
        assert torch.equal(wrapped(torch.ones(3)), torch.full((3,), 3.0))  # the impl's result, as the program gets
    assert RESULTS.by_target["synthetic.scale"].verdict == "differs"


# A bf16 function with cancellation: upstream rounds each product to bf16 and subtracts (its error is the size of a
# bf16 step of x, against a result 100 times smaller); the impl computes in float32 and rounds once.
_A, _B = 1.0, 0.99


def _cancel_upstream(x: torch.Tensor) -> torch.Tensor:
    return x * _A - x * _B


def _cancel_float32(x: torch.Tensor) -> torch.Tensor:
    return (x.float() * (_A - _B)).to(x.dtype)


def _cancel_doubled(x: torch.Tensor) -> torch.Tensor:
    return (x.float() * (_A - _B) * 1.5).to(x.dtype)


def test_a_16_bit_rounding_difference_matches_after_the_float32_replay_and_a_wrong_result_does_not(
    compare_on,
) -> None:
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16).requires_grad_()
    direct = diff_leaf("output", _cancel_float32(x), _cancel_upstream(x))
    assert direct is not None and direct.differs  # by the bf16 thresholds alone, a difference
    good = wrapper.wrap_function("synthetic.cancel", _cancel_float32, _cancel_upstream, Kind.FUNCTION)
    good(x).sum().backward()
    result = RESULTS.by_target["synthetic.cancel"]
    assert result.verdict == "match", result.reasons
    assert any("no further from upstream run in float32 than upstream's own" in r for r in result.reasons)
    wrong = wrapper.wrap_function("synthetic.cancel_wrong", _cancel_doubled, _cancel_upstream, Kind.FUNCTION)
    with pytest.warns(UserWarning, match="against upstream run in float32 its error is"):
        wrong(x).sum().backward()
    assert RESULTS.by_target["synthetic.cancel_wrong"].verdict == "differs"
    # float32 calls are never replayed: the thresholds alone decide
    y = torch.randn(8, generator=torch.Generator().manual_seed(4))
    plain = wrapper.wrap_function("synthetic.cancel32", _cancel_doubled, _cancel_upstream, Kind.FUNCTION)
    with pytest.warns(UserWarning, match="differs from upstream at call 1"):
        plain(y)
    assert not any("float32" in r for r in RESULTS.by_target["synthetic.cancel32"].reasons)


def test_compiled_functions_run_eagerly_inside_the_compare(compare_on) -> None:
    """What the compare runs (the original, the impl's second run) reaches a torch.compile'd helper eagerly: no graph
    is traced or run for the compare's copies, so dynamo's cache and what the program's later calls run are the
    program's own (a compiled graph draws dropout's random numbers otherwise than eager code)."""
    ran: list[str] = []

    def backend(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
        def run(*args: torch.Tensor) -> object:
            ran.append("graph")
            return graph.forward(*args)

        return run

    @torch.compile(backend=backend, dynamic=False)
    def helper(x: torch.Tensor) -> torch.Tensor:
        return x * 2.0

    def original(x: torch.Tensor) -> torch.Tensor:
        return helper(x)

    wrapped = wrapper.wrap_function("synthetic.compiled", original, original, Kind.FUNCTION)
    x = torch.randn(4, 4, requires_grad=True)
    out = wrapped(x)  # the program's call: the compiled graph; the compare's run of the original and the impl's
    out.sum().backward()  # second run (gradients): eager
    assert ran == ["graph"] and RESULTS.by_target["synthetic.compiled"].verdict == "match"
    wrapped(x)
    assert ran == ["graph", "graph"]  # the program's next call takes the program's graph


def test_uninitialised_memory_is_compared_by_its_layout_only(compare_on) -> None:
    """``torch.empty`` (a CPU pack target): the values are the allocator's, on either side; two runs of the impl can
    return the same recycled block, so a value difference would be a false alarm by chance. Shape and dtype count."""
    counter = iter(range(1, 1000))

    def garbage(*size: int) -> torch.Tensor:
        memory = torch.full(size, float(next(counter)))  # other "memory" on every call,
        memory[0, 0] = math.nan  # with a nan where upstream's block has none
        return memory

    wrapped = wrapper.wrap_function("torch.empty", garbage, torch.zeros, Kind.FUNCTION)
    wrapped(4, 4)
    result = RESULTS.by_target["torch.empty"]
    assert result.verdict == "match" and any("uninitialised memory" in r for r in result.reasons), result.reasons

    def wrong_shape(*size: int) -> torch.Tensor:
        return torch.zeros(*size, 2)

    shaped = wrapper.wrap_function("torch.empty_like", wrong_shape, torch.zeros, Kind.FUNCTION)
    with pytest.warns(UserWarning, match="shape"):
        shaped(4, 4)
    assert RESULTS.by_target["torch.empty_like"].verdict == "differs"


def test_the_first_n_calls_pay_then_the_impl_alone_runs(compare_on) -> None:
    calls: list[int] = []

    def original(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x * 2.0

    wrapped = wrapper.wrap_function("synthetic.budget", _scaled, original, Kind.FUNCTION)
    for _ in range(10):
        wrapped(torch.ones(2))
    result = RESULTS.by_target["synthetic.budget"]
    assert len(calls) == 3 and result.calls == 3 and result.seen == 3 and result.verdict == "match"


def test_an_original_that_raises_is_not_compared_and_the_call_goes_on(compare_on) -> None:
    def original(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("Torch not compiled with CUDA enabled")

    wrapped = wrapper.wrap_function("synthetic.raises", _scaled, original, Kind.FUNCTION)
    assert torch.equal(wrapped(torch.ones(2)), torch.full((2,), 2.0))
    result = RESULTS.by_target["synthetic.raises"]
    assert result.verdict == "not compared"
    assert result.reasons == ["the original raises here: RuntimeError: Torch not compiled with CUDA enabled"]


def test_the_program_random_stream_and_gradients_are_its_own(compare_on) -> None:
    """A dropout impl compared against upstream's: the same mask on both sides (the RNG state restored), the
    program's next random numbers as without the compare, its autograd graph untouched."""

    def dropout(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5, training=True)

    wrapped = wrapper.wrap_function("synthetic.dropout", dropout, dropout, Kind.FUNCTION)
    torch.manual_seed(5)
    x = torch.randn(32, requires_grad=True)
    expected = dropout(x)
    expected_next = torch.rand(4)
    torch.manual_seed(5)
    x = torch.randn(32, requires_grad=True)
    got = wrapped(x)
    assert torch.equal(got, expected) and torch.equal(torch.rand(4), expected_next)
    got.sum().backward()
    assert x.grad is not None and torch.equal(x.grad != 0, expected != 0)
    result = RESULTS.by_target["synthetic.dropout"]
    assert result.verdict == "match" and result.leaves == 2  # the output and the input's gradient


def test_an_original_that_writes_into_program_state_is_stopped_before_the_write(compare_on) -> None:
    counter = torch.zeros(1)

    def counting(x: torch.Tensor) -> torch.Tensor:
        counter.add_(1)  # a global the call reaches, not one of its inputs: the guard cannot protect it...
        return x + 1

    holder = types.SimpleNamespace(counter=counter)

    def original(x: torch.Tensor, state: object) -> torch.Tensor:
        state.counter.add_(1)  # type: ignore[attr-defined]  # ...but this one is reachable from the arguments
        return x + 1

    def impl(x: torch.Tensor, state: object) -> torch.Tensor:
        return x + 1

    wrapped = wrapper.wrap_function("synthetic.stateful", impl, original, Kind.FUNCTION)
    assert torch.equal(wrapped(torch.ones(2), holder), torch.full((2,), 2.0))
    assert counter.item() == 0.0  # never written
    result = RESULTS.by_target["synthetic.stateful"]
    assert result.verdict == "not compared" and result.stopped
    assert "writes state the program holds (aten.add_.Tensor" in result.reasons[0]
    assert counting(torch.ones(1)) is not None  # (the unreachable kind: docs/compare.md says what is not seen)


def test_constructors_mocks_and_none_are_listed_with_their_reason(compare_on) -> None:
    from unittest import mock

    assert wrapper.wrap_function("m.C.__init__", _scaled, _scaled_wrong, Kind.METHOD) is _scaled
    assert wrapper.wrap_function("m.te_fn", _scaled, mock.MagicMock(), Kind.FUNCTION) is _scaled
    assert wrapper.wrap_function("m.fused", _scaled, None, Kind.FUNCTION) is _scaled
    assert wrapper.wrap_function("m.cm", _scaled, _scaled, Kind.CLASSMETHOD) is _scaled  # (not wrapped, no reason)
    reasons = {t: r.reasons[0] for t, r in RESULTS.by_target.items()}
    assert reasons["m.C.__init__"].startswith("__init__: it builds or changes the object")
    assert "unittest.mock stand-in" in reasons["m.te_fn"] and "upstream has None here" in reasons["m.fused"]
    assert "m.FLAG" not in reasons  # attributes are listed at exit from the engine's records


def _divide(numerator: int, denominator: int) -> int:
    return numerator // denominator


def test_off_nothing_is_wrapped_on_the_engine_installs_the_wrapper(engine, megatron_core, monkeypatch) -> None:
    """The cost when off is nothing: no wrap hook, the impl's own code at the target (real megatron)."""
    import megatron.core.utils as utils

    upstream = utils.divide
    fl_patch.register("megatron.core.utils.divide", _divide)
    fl_patch.install()
    assert wrapper.wrap_function not in engine.applier.wraps and utils.divide.__code__ is _divide.__code__
    fl_patch.uninstall()
    assert utils.divide is upstream
    monkeypatch.setenv("FL_PATCH_COMPARE", "2")
    fl_patch.install()
    assert wrapper.wrap_function in engine.applier.wraps and wrapper.wrap_class in engine.applier.class_wraps
    installed = utils.divide
    assert installed.__code__ is not _divide.__code__ and installed.__name__ == "divide"
    assert installed.__wrapped__ is upstream
    assert installed(6, 3) == 2 and fl_patch.original("megatron.core.utils.divide") is upstream
    fl_patch.uninstall()
    assert utils.divide is upstream


# ------------------------------------------------------------------------------------------- records
def test_records_of_ranks_merge_by_target() -> None:
    rank0 = {"target": "t", "verdict": "match", "calls": 3, "max_abs": 0.0, "max_rel": 1e-7, "cosine": 1.0, "rank": "0"}
    rank1 = {
        "target": "t",
        "verdict": "differs",
        "calls": 2,
        "max_abs": 0.5,
        "max_rel": 2.0,
        "cosine": 0.3,
        "rank": "1",
    }
    other = {"target": "u", "verdict": "not compared", "calls": 0, "reason": "never called", "rank": "0"}
    merged = {r["target"]: r for r in merge([rank0, other, rank1])}
    assert merged["t"]["verdict"] == "differs" and merged["t"]["calls"] == 5 and merged["t"]["ranks"] == ["0", "1"]
    assert merged["t"]["max_abs"] == 0.5 and merged["t"]["cosine"] == 0.3 and merged["u"]["reason"] == "never called"


# ------------------------------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["--compare", "x.py"], str(DEFAULT_COMPARE_CALLS)),
        (["--compare", "5", "x.py"], "5"),
        (["--compare=7", "x.py"], "7"),
        (["--compare", "--strict", "x.py"], str(DEFAULT_COMPARE_CALLS)),
        (["--compare", "0", "x.py"], "0"),
    ],
)
def test_compare_takes_an_optional_number(words: list[str], expected: str) -> None:
    options = cli.parse(words, prog="fl-patch")
    assert options.env[ENV.COMPARE] == expected and options.program == ["x.py"]
    assert Settings.from_environ({ENV.COMPARE: expected}).compare_calls == int(expected)


@pytest.mark.parametrize(
    "words", [["--compare", "2.5", "x.py"], ["--compare=abc", "x.py"], ["--compare", "-1", "x.py"]]
)
def test_a_number_of_calls_that_does_not_parse_is_a_usage_error(words: list[str], capsys) -> None:
    assert cli.main(words) == 2
    assert "is not a number of calls" in capsys.readouterr().err


def test_the_variable_reads_as_the_option_and_says_what_it_could_not_read() -> None:
    assert compare_calls("") == (0, None) and compare_calls("off") == (0, None) and compare_calls("12") == (12, None)
    assert compare_calls("yes") == (DEFAULT_COMPARE_CALLS, None)
    calls, message = compare_calls("many")
    assert calls == DEFAULT_COMPARE_CALLS and message is not None and "FL_PATCH_COMPARE='many'" in message
    assert any("FL_PATCH_COMPARE" in m for m in unrecognised_values({ENV.COMPARE: "many"}))
    assert Settings.from_environ({ENV.COMPARE_JSON: "/tmp/c.jsonl"}).compare_calls == DEFAULT_COMPARE_CALLS


@pytest.mark.parametrize(
    ("words", "cause"),
    [
        (["compare", "--", "x.py"], "the following arguments are required: --baseline"),
        (["compare", "--baseline", "upstream"], "no program to run"),
        (["compare", "--baseline", "upstream", "--calls", "x", "--", "x.py"], "'x' is not a number of calls"),
    ],
)
def test_the_whole_run_compare_refuses_bad_usage(words: list[str], cause: str, capsys) -> None:
    assert cli.main(words) == 2
    err = capsys.readouterr().err
    assert cause in err and "usage: " in err


# ------------------------------------------------------------------------------------------- the table
def _entry(target: str, verdict: str, pack: str, max_rel: float | None = None, reason: str = "") -> dict[str, object]:
    return {
        "target": target, "verdict": verdict, "pack": pack, "vendor": "cpu" if pack != "none" else "default",
        "impl": f"{pack}.impl", "calls": 3 if verdict != "not compared" else 0, "max_abs": max_rel, "max_rel": max_rel,
        "cosine": 1.0 if max_rel is not None else None, "kind": "function", "worst": "call 1" if max_rel else None,
        "reason": reason, "shapes": [],
    }  # fmt: skip


ENTRIES = [
    _entry("megatron.core.transformer.mlp.MLP.forward", "differs", "none", 0.01),
    _entry("megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb", "match", "none", 0.0),
    _entry("my_plugin.never", "not compared", "none", reason="never called"),
    *[_entry(f"megatron.core.cpu_target_{i}", "match", "cpu", 0.0) for i in range(30)],
    *[_entry(f"torch.cuda_target_{i}", "not compared", "cuda_on_cpu", reason="no tensor") for i in range(40)],
    _entry("megatron.core.pack_wrong", "differs", "cpu", 0.5),
]


def table_targets(lines: list[str]) -> list[str]:
    """The targets of a compare table, in its order: each block starts with the target, then its verdict."""
    verdicts = ("  differs", "  match", "  not compared")
    body = next(i for i, line in enumerate(lines) if i and not line.startswith(" "))  # (after the wrapped head)
    return [line for line, after in itertools.pairwise(lines[body:]) if after.startswith(verdicts)]


def test_the_table_leads_with_the_plugins_rows_and_gives_each_pack_one_line() -> None:
    """With 73 pack rows, the plugin's three (a difference, a match, one never called) are on the first screen
    (24 lines, 100 columns) in full, worst first; a pack's row that differs is shown too; each pack is one line."""
    from fl_patch.compare.table import format_table

    lines = format_table(ENTRIES, 3, label="test", width=100).splitlines()
    assert max(len(line) for line in lines) <= 100, lines
    assert len(lines) <= 24, lines
    head = next(i for i, line in enumerate(lines) if not line.startswith(("fl_patch compare", "  ")))
    assert lines[head] == "yours: 1 differs, 1 match, 1 not compared", lines
    rows = table_targets(lines)
    assert rows[:3] == ["megatron.core.transformer.mlp.MLP.forward", ENTRIES[1]["target"], "my_plugin.never"], lines
    assert "megatron.core.pack_wrong" in rows and not any("cpu_target" in row for row in rows), lines
    assert "  cpu          30 match, 1 differs" in lines and "  cuda_on_cpu  40 not compared" in lines, lines
    everything = format_table(ENTRIES, 3, label="test", width=100, show_all=True)
    assert "pack cpu: 30 match, 1 differs" in everything and "megatron.core.cpu_target_7" in everything
    assert "not compared, not listed" not in everything  # (no quiet row: reasons of their own are listed)
    only = format_table(ENTRIES, 3, label="test", width=100, only=[("pack", "cuda_on_cpu")]).splitlines()
    assert only[head] == "rows matching --only pack=cuda_on_cpu: 40" and len(table_targets(only)) == 40, only[:4]


def test_all_and_only_go_with_compare_and_reach_the_programs_table() -> None:
    options = cli.parse(["--compare", "--all", "--only", "pack=none", "x.py"], prog="fl-patch")
    assert options.env[ENV.REPORT_ALL] == "1" and options.env[ENV.REPORT_ONLY] == "pack=none"
    settings = Settings.from_environ(options.env)
    assert settings.report_all and settings.report_only == (("pack", "none"),) and settings.compare_calls == 3


# ------------------------------------------------------------------------------------------- the whole-run steps
MEGATRON_LOG = """\
 [2026-12-05 12:31:25.241627] iteration        1/       3 | consumed samples:            4 | lm loss: 4.894989E+00 | loss scale: 1.0 | grad norm: 1.039 | number of skipped iterations:   0 |
 [2026-12-05 12:31:26.395356] iteration        2/       3 | consumed samples:            8 | lm loss: 4.897143E+00 | loss scale: 1.0 | grad norm: 1.050 | number of skipped iterations:   0 |
 validation loss at iteration 3 | lm loss value: 4.717813E+00 | lm loss PPL: 1.119232E+02 |
"""


def test_steps_are_read_from_megatrons_log_or_plain_step_lines() -> None:
    megatron = read_log_steps(MEGATRON_LOG)
    assert megatron.values == {1: (4.894989, 1.039), 2: (4.897143, 1.050)} and "megatron" in megatron.source
    plain = read_log_steps("[####....] step 1/30  loss 4.8522  1 tokens/s\rstep 2/30  loss 4.8464  2 tokens/s\n")
    assert plain.values == {1: (4.8522, None), 2: (4.8464, None)}
    custom = read_log_steps("it=3 L=2.5 G=0.1\n", r"it=(?P<step>\d+) L=(?P<loss>\S+) G=(?P<grad_norm>\S+)")
    assert custom.values == {3: (2.5, 0.1)}


def test_the_first_step_where_the_runs_part() -> None:
    from fl_patch.compare.run import Steps

    base = Steps({1: (4.0, 1.0), 2: (3.0, 1.0), 3: (2.0, 1.0)})
    same = side_by_side(base, Steps(dict(base.values)))
    assert first_parting(same, 1e-3, 1e-2) is None
    off = side_by_side(base, Steps({1: (4.0, 1.0), 2: (3.0, 1.05), 3: (2.1, 1.0)}))
    assert first_parting(off, 1e-3, 1e-2) == 2 and first_parting(off, 1e-3, 0.1) == 3
    short = side_by_side(base, Steps({1: (4.0, 1.0)}))
    assert first_parting(short, 1e-3, 1e-2) == 2  # a run that stopped early parts where it stopped
