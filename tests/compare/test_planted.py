"""Compare mode catches wrong impls: the planted plugin (``tests/support/compare/compare_wrong``), each impl registered on
the real megatron-core 0.19.2 target it would replace, run under ``--compare`` in the demo (``examples/train_gpt.py``,
local spec with RMSNorm, SwiGLU and query-key layer scaling, so that every planted target is called).

Each wrong impl trains (the run ends with status 0 and the loss goes down), and each is flagged "differs", by the leaf
where its bug shows: a norm's weight gradient, RoPE's output, SwiGLU's output and gradients, the softmax at the second
layer (the first has scale 1: the same as upstream), the mask's booleans, Adam's parameters after a step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support.compare.compare_runs import DEMO, PLANTED_ARCHITECTURE, fl_patch
from .test_compare import table_targets

pytestmark = pytest.mark.slow

WRONG = {
    "megatron.core.transformer.torch_norm.WrappedTorchNorm": "forward of the module it builds: grad of param weight: "
    "None where upstream gives a tensor",
    "megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb": "output (float32",
    "megatron.core.transformer.mlp.MLP.forward": "output[0] (float32",
    "megatron.core.fusions.fused_softmax.FusedScaleMaskSoftmax.forward": "at call 2: output (float32",
    "megatron.core.transformer.utils.get_default_causal_mask": "elements not equal to upstream's",
    "megatron.core.optimizer.Adam": "step: self.param_groups[",
}


def _demo(tmp_path: Path, *options: str) -> list[str]:
    demo = [str(DEMO), "--steps", "2", "--warmup-steps", "0", "--num-microbatches", "1", "--quiet"]
    return [*options, "--registry", "compare_wrong.registry", *demo, *PLANTED_ARCHITECTURE]


def test_each_planted_wrong_impl_is_flagged_and_the_run_goes_on(tmp_path: Path) -> None:
    run = fl_patch(tmp_path, *_demo(tmp_path, "--compare", "3"))
    assert run.returncode == 0, run.stderr[-4000:]
    records = run.records()
    for target, where in WRONG.items():
        record = records[target]
        assert record["verdict"] == "differs", record
        assert record["impl"].startswith("compare_wrong.") and record["status"] == "error"
        warning = next(line for line in run.stderr.splitlines() if f"fl_patch --compare: {target} (" in line)
        assert where in warning, warning
    assert records["megatron.core.optimizer.Adam"]["calls"] == 2  # one per step
    # Nothing else differs: the CPU pack's targets on the same run match, or say why they were not compared.
    others = {t: r["verdict"] for t, r in records.items() if t not in WRONG}
    assert "differs" not in others.values(), [t for t, v in others.items() if v == "differs"]
    assert records["megatron.core.transformer.transformer_block.LayerNormImpl"]["verdict"] == "match"
    table = run.stderr[run.stderr.index("fl_patch compare (") :]
    assert "6 differ, " in " ".join(table.split())  # (the summary line wraps at the width)
    # the plugin's rows first, each block its target then its verdict: the six, worst first
    rows = table_targets(table.splitlines())
    assert rows[:6] == sorted(WRONG, key=lambda t: -records[t]["max_rel"]), table[:3000]


def test_in_bf16_the_float32_replay_hides_none_of_them(tmp_path: Path) -> None:
    """The same run in bf16, where a 16-bit difference is judged against upstream replayed in float32: each planted
    impl is still "differs", its cause saying how many times upstream's own error it is; nothing else differs."""
    run = fl_patch(tmp_path, *_demo(tmp_path, "--compare", "3"), "--precision", "bf16")
    assert run.returncode == 0, run.stderr[-4000:]
    records = run.records()
    assert {t for t, r in records.items() if r["verdict"] == "differs"} == set(WRONG)
    for target in ("megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb",
                   "megatron.core.transformer.mlp.MLP.forward"):  # fmt: skip
        assert "against upstream run in float32 its error is" in records[target]["worst"], records[target]


def test_strict_ends_the_run_at_the_first_difference(tmp_path: Path) -> None:
    run = fl_patch(tmp_path, *_demo(tmp_path, "--compare", "--strict"))
    assert run.returncode == 1
    errors = [line for line in run.stderr.splitlines() if "FlPatchError: " in line]  # (torch prefixes "[rank0]: ")
    assert len(errors) == 1 and "fl_patch --compare: " in errors[0] and "differs from upstream" in errors[0], errors
    assert run.lines and any(r["verdict"] == "differs" for r in run.lines[0]["records"])  # the records still written
