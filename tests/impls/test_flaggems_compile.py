"""Every Triton kernel of the FlagGems pack compiles for sm_90 (H100/H200) on this CPU-only machine.

The interpreter tests run the kernels as Python; this runs the GPU compiler on them
(``tests/support/flaggems/gems_compile.py`` says why both), so code only the device's compiler
rejects fails here instead of on the GPU. Skips without ``.cache/triton-cpu`` (made by
``scripts/triton-cpu.sh``, which ``scripts/bootstrap.sh`` runs).
"""

from __future__ import annotations

import json

import pytest

from ..conftest import SUPPORT, TRITON_CPU, triton_env

pytestmark = pytest.mark.skipif(
    not (TRITON_CPU / "triton").is_dir(), reason="no .cache/triton-cpu (run scripts/triton-cpu.sh)"
)

LAUNCHED_KERNELS = {
    "_attn_fwd", "_attn_bwd_delta", "_attn_bwd_dq", "_attn_bwd_dkdv", "_ce_fwd", "_ce_bwd", "_ce_fwd_partial",
    "_rms_fwd", "_rms_bwd", "_ln_fwd", "_ln_bwd", "_sum_parts", "_softmax_fwd", "_softmax_bwd",
    "_swiglu_fwd", "_swiglu_bwd", "_rope", "_qkv_rope_fwd", "_qkv_rope_bwd",
    "_scatter_rows", "_gather_rows", "_weight_grad", "_map_columns", "_map_rows", "_sort_chunks",
    "_amax_kernel", "_cast_kernel", "_cast_1x128_kernel", "_cast_128x128_kernel", "_swiglu_fp8_fwd", "_swiglu_fp8_bwd",
}  # fmt: skip


def test_every_kernel_compiles_for_the_gpu(run_python, tmp_path) -> None:
    # A fresh triton cache: a kernel compiled earlier on this machine is compiled again.
    env = triton_env(interpret=False, TRITON_CACHE_DIR=str(tmp_path / "triton-cache"))
    proc = run_python(str(SUPPORT / "flaggems" / "gems_compile.py"), env=env, check=False, timeout=600)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    failures = [f"{c['kernel']} {c['constexprs']}: {c['error'][-600:]}" for c in lines[:-1] if not c["ok"]]
    assert proc.returncode == 0 and not failures, failures or proc.stderr[-3000:]
    summary = lines[-1]
    assert summary["failed"] == 0 and summary["compiled"] == len(lines) - 1 >= 30
    assert set(summary["kernels"]) == LAUNCHED_KERNELS
