"""Compare mode on the shipped packs and the example plugin, real megatron-core 0.19.2: no false alarm, and the
program computes exactly what it computes without the compare.

- the demo (local spec) with the CPU pack and ``examples/my_plugin``: every patch compared matches (my_plugin's
  norm factory, its ``TransformerLayer.forward`` on the layer's own parameters with dropout on, its wrapped grad norm;
  the CPU pack's final norm and its CUDA-on-CPU factories); the CPU pack's ``clip_grad_by_total_norm_fp32`` is "not
  compared" because upstream's asserts a CUDA tensor here (an original that raises is a reason, never a crash); the
  losses and grad norms of every step are bit for bit those of the same run without ``--compare``;
- the demo with the TE spec, MoE (alltoall) and MLA: nothing differs;
- two ranks (torchrun, tensor parallel 2): each rank writes its own records, and no original that reaches a
  collective is run a second time (``get_grad_norm_fp32``'s all-reduce, the layer's tensor-parallel all-reduce).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.compare.compare_runs import DEMO, env, fl_patch
from ..support.ports import free_port

pytestmark = pytest.mark.slow

MY_PLUGIN = {
    "megatron.core.transformer.torch_norm.WrappedTorchNorm",
    "megatron.core.transformer.transformer_layer.TransformerLayer.forward",
    "megatron.core.optimizer.clip_grads.get_grad_norm_fp32",
}


def _demo(*args: str) -> list[str]:
    return [str(DEMO), "--steps", "2", "--num-microbatches", "1", "--quiet", *args]


def test_no_false_alarm_and_the_run_computes_what_it_computes_without_the_compare(tmp_path: Path) -> None:
    plain_log, compared_log = tmp_path / "plain.jsonl", tmp_path / "compared.jsonl"
    plain = subprocess.Popen(
        [sys.executable, "-m", "fl_patch", "--registry", "my_plugin.registry", *_demo("--log-file", str(plain_log))],
        env=env(),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    run = fl_patch(
        tmp_path, "--registry", "my_plugin.registry", "--compare", "2", *_demo("--log-file", str(compared_log))
    )
    assert plain.wait(timeout=300) == 0 and run.returncode == 0, run.stderr[-4000:]
    steps = [[json.loads(line) for line in log.read_text().splitlines()] for log in (plain_log, compared_log)]
    assert [(s["loss"], s["grad_norm"]) for s in steps[0]] == [(s["loss"], s["grad_norm"]) for s in steps[1]]
    records = run.records()
    assert not [t for t, r in records.items() if r["verdict"] == "differs"]
    for target in MY_PLUGIN | {"megatron.core.transformer.transformer_block.LayerNormImpl", "torch.zeros"}:
        assert records[target]["verdict"] == "match" and records[target]["calls"] == 2, records[target]
    layer = records["megatron.core.transformer.transformer_layer.TransformerLayer.forward"]
    assert layer["leaves"] > 2 * 2  # the output and the gradients of the input and of the layer's parameters
    clip = records["megatron.core.optimizer.clip_grads.clip_grad_by_total_norm_fp32"]
    assert clip["verdict"] == "not compared" and "the original raises here: AssertionError" in clip["reason"]
    assert (
        records["megatron.core.utils.divide"]["reason"] == "no tensor in or out of its calls (not a numerical function)"
    )


def test_the_te_spec_with_moe_and_mla_has_no_false_alarm(tmp_path: Path) -> None:
    run = fl_patch(
        tmp_path,
        "--registry",
        "my_plugin.registry",
        "--compare",
        "2",
        *_demo("--spec", "te", "--experts", "4", "--mla"),
    )
    assert run.returncode == 0, run.stderr[-4000:]
    records = run.records()
    assert not [t for t, r in records.items() if r["verdict"] == "differs"]
    assert sum(r["verdict"] == "match" for r in records.values()) >= 8


def test_two_ranks_never_run_a_collective_twice_and_write_a_line_each(tmp_path: Path) -> None:
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", f"--master-port={free_port()}"]
    run = fl_patch(tmp_path, "--registry", "my_plugin.registry", "--compare", *torchrun, *_demo("--tp", "2"))
    assert run.returncode == 0, run.stderr[-4000:]
    assert sorted(line["rank"] for line in run.lines) == ["0", "1"]
    for rank in ("0", "1"):
        records = run.records(rank)
        assert not [t for t, r in records.items() if r["verdict"] == "differs"]
        for target in ("megatron.core.optimizer.clip_grads.get_grad_norm_fp32",):
            reason = records[target]["reason"]
            assert records[target]["calls"] == 0 and reason.startswith("not run: it communicates (c10d."), reason
        layer = records["megatron.core.transformer.transformer_layer.TransformerLayer.forward"]
        assert "not run: it communicates" in layer["reason"] and layer["calls_seen"] == 1  # stopped after the first
        assert records["megatron.core.transformer.torch_norm.WrappedTorchNorm"]["verdict"] == "match"
