"""``bench/fp8_seed_gaps.py`` and the data its curves train on (``gems_gpt.py --data zipf``:
``tests/support/flaggems/gems_data.py``): the gaps it prints are the runs' gaps, and the Zipf chain is the
text-like data its docstring says."""

from __future__ import annotations

import json
import math
import runpy
import sys
from pathlib import Path

import torch

from ..conftest import REPO


def _run(seed: int, kind: str, losses: list[float]) -> dict:
    run: dict = {"hidden": 2048, "seed": seed, "data": "zipf", "losses": losses}
    if kind == "fp8":
        run.update(fp8="hybrid", fp8_recipe="tensorwise")
    return run


def test_the_gaps_are_the_runs_gaps_signed_and_over_the_seeds_mean(tmp_path: Path, capsys, monkeypatch) -> None:
    steps = 120
    base = [10.0 - 8.0 * i / steps for i in range(steps)]  # ends near 2
    runs = {
        # seed 1: fp8 1% above bf16 over the last 50 steps; seed 2: 3% below
        "s1_bf16": _run(1, "bf16", base),
        "s1_fp8": _run(1, "fp8", [v * (1.01 if i >= steps - 50 else 1.0) for i, v in enumerate(base)]),
        "s2_bf16": _run(2, "bf16", base),
        "s2_fp8": _run(2, "fp8", [v * (0.97 if i >= steps - 50 else 1.0) for i, v in enumerate(base)]),
        # another data set's run, which --data zipf must not read
        "markov_fp8": {**_run(1, "fp8", [v * 2 for v in base]), "data": "markov"},
    }
    path = tmp_path / "curves.json"
    path.write_text(json.dumps(runs))
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    script = runpy.run_path(str(REPO / "bench" / "fp8_seed_gaps.py"), run_name="fp8_seed_gaps")
    monkeypatch.setattr(
        sys, "argv", ["fp8_seed_gaps.py", str(path), "--data", "zipf", "--out", str(tmp_path / "g.json")]
    )
    assert script["main"]() == 0
    summary = json.loads((tmp_path / "g.json").read_text())["summary"]
    signed = summary["fp8_minus_bf16_last50_signed"]
    assert math.isclose(signed[0], 0.01, rel_tol=1e-9) and math.isclose(signed[1], -0.03, rel_tol=1e-9)
    # the mean curves: fp8's last 50 steps at (1.01 + 0.97) / 2 of bf16's
    assert math.isclose(summary["seed_mean_curves"]["last50"], 0.01, rel_tol=1e-9)
    assert summary["seeds"] == [1, 2]
    assert "markov" not in capsys.readouterr().out


def test_the_zipf_chain_is_skewed_like_text_and_fixed_by_its_seed() -> None:
    gems_data = runpy.run_path(str(REPO / "tests" / "support" / "flaggems" / "gems_data.py"))
    vocab = 2000
    first = torch.stack(list(gems_data["zipf_batches"](vocab, 4, 256, 7, "cpu", 6)))
    again = torch.stack(list(gems_data["zipf_batches"](vocab, 4, 256, 7, "cpu", 6)))
    assert first.shape == (6, 4, 257) and torch.equal(first, again)
    counts = torch.bincount(first.flatten(), minlength=vocab).sort(descending=True).values
    # Zipf: the most frequent tenth of the tokens carries most of the text; a uniform chain's tenth carries ~10%
    assert counts[: vocab // 10].sum() > 0.6 * counts.sum()
    uniform = torch.stack(list(gems_data["markov_batches"](vocab, 4, 256, 7, "cpu", 6)))
    uniform_counts = torch.bincount(uniform.flatten(), minlength=vocab).sort(descending=True).values
    assert uniform_counts[: vocab // 10].sum() < 0.3 * uniform_counts.sum()
    # a Markov chain: outside the 5% noise, each token is followed by one of its 4 successors
    tokens, following = first[..., :-1].flatten(), first[..., 1:].flatten()
    for token in torch.bincount(tokens, minlength=vocab).argsort(descending=True)[:5].tolist():
        follow = torch.bincount(following[tokens == token], minlength=vocab).sort(descending=True).values
        assert follow[:4].sum() >= 0.9 * follow.sum()
