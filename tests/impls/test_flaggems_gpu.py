"""The FlagGems pack on a CUDA GPU: every op against torch autograd, every impl against upstream, GPT loss curves.

Skipped without a GPU. Three levels:
1. Ops (``tests/support/flaggems/gems_checks.py``): forward and every input gradient against
   torch autograd in fp64 and in the same dtype, fp32 and bf16, contiguous and
   strided, 2-D and 3-D (4-D ops vary batch and heads), odd sizes; for this
   project's kernels (fixed block config: ``FL_GEMS_AUTOTUNE=0`` keeps compile time
   down; one test runs the autotuned attention) and for the FlagGems backends.
2. Impls against upstream megatron-core 0.19.2 on modules upstream built: the
   pack's ``forward`` and upstream's on the same inputs, outputs and gradients
   compared; fallbacks (explicit masks) checked to run upstream and be recorded.
3. A GPT (4 layers, hidden 512, seq 512, bf16) trained 300 steps with and without
   the pack: loss curves compared (tolerance in ``test_gpt_loss_curves_agree``).
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
from pathlib import Path

import pytest
import torch

SUPPORT = Path(__file__).resolve().parents[1] / "support"
sys.path.insert(0, str(SUPPORT / "flaggems"))
# FlagGems keeps its tuning results in one sqlite file; one per pytest-xdist worker (no lock contention).
os.environ.setdefault(
    "FLAGGEMS_DB_URL",
    f"sqlite:////tmp/flaggems_tuned_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{os.getpid()}.db",
)

import gems_checks  # noqa: E402

from ..conftest import REPO, clean_env  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _knob(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    """Set a launch knob for this test: the kernels read FL_GEMS_AUTOTUNE / FL_GEMS_LEAN_LAUNCH once."""
    from fl_patch.impls.flaggems import kernels

    monkeypatch.setenv(name, value)
    monkeypatch.setattr(kernels, "SETTINGS", kernels.LaunchSettings.from_env())


@pytest.fixture(autouse=True)
def _fixed_kernel_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    _knob(monkeypatch, "FL_GEMS_AUTOTUNE", "0")
    monkeypatch.setenv("FL_GEMS_AUTOTUNE_CACHE", "0")  # a test that tunes tunes (no picks from earlier runs)


def _report(result: dict) -> str:
    errors = "; ".join(f"{k}: ours {v[0]:.2e} torch {v[1]:.2e}" for k, v in result["errors"].items())
    return f"{result['problems']} ({errors})"


@pytest.mark.parametrize("case", gems_checks.gpu_cases(), ids=lambda c: c.id)
def test_op_matches_torch_autograd(case: gems_checks.Case) -> None:
    result = gems_checks.check(case, "cuda")
    assert not result["problems"], _report(result)


# ---------------------------------------------------------------------------------- impls vs upstream
@pytest.fixture(scope="module")
def megatron_parallel():
    """megatron.core with a one-rank NCCL group and model-parallel state (upstream modules need them)."""
    import megatron.core  # noqa: F401  (triton is there on a GPU machine: no stand-in needed)
    from megatron.core import parallel_state

    if not torch.distributed.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        torch.cuda.set_device(0)
        torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    model_parallel_cuda_manual_seed(0)
    yield parallel_state


def _config(dtype: torch.dtype, **overrides: object):
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs = dict(
        num_layers=1, hidden_size=256, num_attention_heads=8, num_query_groups=2, ffn_hidden_size=704,
        normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
        bias_activation_fusion=False, masked_softmax_fusion=False, apply_rope_fusion=False,
        gradient_accumulation_fusion=False, attention_dropout=0.0, hidden_dropout=0.0,
        bf16=dtype == torch.bfloat16, params_dtype=dtype,
    )  # fmt: skip
    kwargs.update(overrides)
    return TransformerConfig(**kwargs)


def _close(ours: torch.Tensor, upstream: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    assert ours.shape == upstream.shape, f"{what}: {ours.shape} != {upstream.shape}"
    assert torch.isfinite(ours.float()).all(), f"{what}: non-finite"
    rel = ((ours.double() - upstream.double()).norm() / upstream.double().norm().clamp_min(1e-30)).item()
    bound = 1e-4 if dtype == torch.float32 else 2e-2
    assert rel <= bound, f"{what}: relative difference to upstream {rel:.3g} > {bound}"


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("normalization", ["RMSNorm", "LayerNorm"])
def test_norm_module_matches_upstream(megatron_parallel, dtype, normalization) -> None:
    from megatron.core.transformer.torch_norm import WrappedTorchNorm as Upstream

    from fl_patch.impls.flaggems import norm

    cfg = _config(dtype, normalization=normalization)
    up = Upstream(config=cfg, hidden_size=1000, eps=1e-5).cuda().to(dtype)
    ours = norm.WrappedTorchNorm(config=cfg, hidden_size=1000, eps=1e-5).cuda().to(dtype)
    assert isinstance(ours, type(up)) and type(ours) is not type(up)
    assert list(ours.state_dict()) == list(up.state_dict())
    with torch.no_grad():
        for p in up.parameters():
            p.copy_(torch.randn_like(p) * 0.1 + 1.0)
    ours.load_state_dict(up.state_dict())
    x = torch.randn(3, 37, 1000, device="cuda", dtype=dtype).transpose(0, 1)
    dy = torch.randn(1000, 37, 3, device="cuda", dtype=dtype).permute(1, 2, 0)
    results = []
    for module in (ours, up):
        xi = x.detach().clone().requires_grad_(True)
        y = module(xi)
        y.backward(dy)
        results.append([y, xi.grad, *[p.grad for p in module.parameters()]])
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        _close(a, b, dtype, f"{normalization} tensor {i}")


def _qkv(sq: int, b: int, hq: int, hkv: int, d: int, dtype: torch.dtype):
    """q/k/v as megatron's attention hands them: slices of a fused projection output."""
    group = hq // hkv
    mixed = torch.randn(sq, b, hkv, (group + 2) * d, device="cuda", dtype=dtype, requires_grad=True)
    q = mixed[..., : group * d].reshape(sq, b, hq, d)
    k = mixed[..., group * d : (group + 1) * d]
    v = mixed[..., (group + 1) * d :]
    return mixed, q, k, v


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask", ["none", "causal_tensor"])
def test_core_attention_matches_upstream(megatron_parallel, dtype, mask) -> None:
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    from fl_patch.impls.flaggems import attention
    from fl_patch.impls.flaggems._runtime import FALLBACKS, reset_fallbacks

    reset_fallbacks()
    cfg = _config(dtype, num_attention_heads=8, num_query_groups=2, kv_channels=64, hidden_size=512)
    module = DotProductAttention(cfg, 1, AttnMaskType.causal, "self").cuda()
    sq = 193
    attention_mask = None
    if mask == "causal_tensor":
        attention_mask = torch.ones(1, 1, sq, sq, dtype=torch.bool, device="cuda").triu(1)
    results = []
    grad = None
    for fn in (attention.dot_product_attention_forward, DotProductAttention.forward):
        torch.manual_seed(5)
        mixed, q, k, v = _qkv(sq, 2, 8, 2, 64, dtype)
        out = fn(module, q, k, v, attention_mask)
        grad = torch.randn_like(out) if grad is None else grad
        out.backward(grad)
        results.append([out, mixed.grad])
    assert not [k for k in FALLBACKS if k[0] == "attention"], FALLBACKS
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        _close(a, b, dtype, f"attention tensor {i}")


def test_core_attention_with_other_mask_runs_upstream_and_says_so(megatron_parallel) -> None:
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    from fl_patch.impls.flaggems import attention
    from fl_patch.impls.flaggems._runtime import FALLBACKS, reset_fallbacks

    reset_fallbacks()
    cfg = _config(torch.bfloat16, kv_channels=32, hidden_size=256)
    module = DotProductAttention(cfg, 1, AttnMaskType.causal, "self").cuda()
    padding = torch.rand(2, 1, 64, 64, device="cuda") > 0.8
    _, q, k, v = _qkv(64, 2, 8, 2, 32, torch.bfloat16)
    ours = attention.dot_product_attention_forward(module, q, k, v, padding)
    upstream = DotProductAttention.forward(module, q, k, v, padding)
    assert torch.equal(ours, upstream)  # upstream itself ran
    assert FALLBACKS.get(("attention", "an explicit attention mask other than the causal one")) == 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask", ["causal", "tensor"])
def test_masked_softmax_matches_upstream(megatron_parallel, dtype, mask) -> None:
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.utils import attention_mask_func

    from fl_patch.impls.flaggems import softmax

    module = FusedScaleMaskSoftmax(
        False, dtype == torch.bfloat16, AttnMaskType.causal, False, attention_mask_func, True, 2.0
    )
    tensor_mask = (torch.rand(2, 1, 77, 77, device="cuda") > 0.6) if mask == "tensor" else None
    scores = torch.randn(2, 4, 77, 77, device="cuda", dtype=dtype)
    grad = torch.randn(2, 4, 77, 77, device="cuda", dtype=dtype)
    results = []
    for fn in (softmax.scale_mask_softmax_forward, FusedScaleMaskSoftmax.forward):
        x = scores.clone().requires_grad_(True)
        y = fn(module, x, tensor_mask)
        y.backward(grad.to(y.dtype))
        results.append([y, x.grad])
    assert results[0][0].dtype == results[1][0].dtype
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        _close(a, b, dtype, f"softmax tensor {i}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_mlp_matches_upstream(megatron_parallel, dtype, bias) -> None:
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.mlp import MLP, MLPSubmodules

    from fl_patch.impls.flaggems import mlp

    cfg = _config(dtype, add_bias_linear=bias)
    module = MLP(cfg, MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear)).cuda()
    x = torch.randn(3, 37, 256, device="cuda", dtype=dtype).transpose(0, 1)
    results = []
    grad = None
    for fn in (mlp.mlp_forward, MLP.forward):
        module.zero_grad(set_to_none=True)
        xi = x.detach().clone().requires_grad_(True)
        out, out_bias = fn(module, xi)
        grad = torch.randn_like(out) if grad is None else grad
        (out if out_bias is None else out + out_bias).backward(grad)
        results.append(
            [out, xi.grad, *[p.main_grad if hasattr(p, "main_grad") else p.grad for p in module.parameters()]]
        )
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        _close(a, b, dtype, f"mlp tensor {i}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_matches_upstream(megatron_parallel, dtype, interleaved) -> None:
    from megatron.core.models.common.embeddings import rope_utils

    from fl_patch.impls.flaggems import rope

    cfg = _config(dtype, rotary_interleaved=interleaved)
    inv = 1.0 / (10000 ** (torch.arange(0, 64, 2, device="cuda", dtype=torch.float32) / 64))
    angles = torch.outer(torch.arange(129, device="cuda", dtype=torch.float32), inv)
    freqs = (angles.repeat_interleave(2, -1) if interleaved else torch.cat((angles, angles), -1))[:, None, None, :]
    _, q, _, _ = _qkv(129, 2, 8, 2, 96, dtype)  # head dim 96, rotary width 64
    grad = torch.randn(129, 2, 8, 96, device="cuda", dtype=dtype)
    results = []
    for fn in (rope.apply_rotary_pos_emb, rope_utils.apply_rotary_pos_emb):
        t = q.detach().clone().requires_grad_(True)
        out = fn(t, freqs, cfg, mscale=1.25)
        out.backward(grad)
        results.append([out, t.grad])
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        _close(a, b, dtype, f"rope tensor {i}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_qkv_rope_matches_the_split_path_of_upstream_attention(megatron_parallel, dtype) -> None:
    """A SelfAttention upstream built: fused_single_qkv_rope=True served by the pack's one-launch
    function, against the split path with upstream's own RoPE (no fl_patch engine in this file)."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.transformer import attention as attention_module

    from fl_patch.impls.flaggems import rope

    cfg = _config(dtype)
    module = gems_checks.local_self_attention(cfg).cuda()
    emb = RotaryEmbedding(kv_channels=32, rotary_percent=1.0)(257)
    hidden = torch.randn(257, 2, 256, device="cuda", dtype=dtype)
    grad = torch.randn(257, 2, 256, device="cuda", dtype=dtype)
    had_flag = attention_module.HAVE_FUSED_QKV_ROPE
    had_function = getattr(attention_module, "apply_fused_qkv_rotary_pos_emb", None)
    calls = []

    def counting(*args: object) -> object:
        calls.append(args[0].shape)
        return rope.apply_fused_qkv_rotary_pos_emb(*args)

    results = []
    try:
        attention_module.apply_fused_qkv_rotary_pos_emb = counting
        for fused in (True, False):
            cfg.fused_single_qkv_rope = fused
            attention_module.HAVE_FUSED_QKV_ROPE = fused
            module.zero_grad(set_to_none=True)
            h = hidden.clone().requires_grad_(True)
            out, _ = module(h, attention_mask=None, rotary_pos_emb=(emb, emb))
            out.backward(grad)
            results.append([out, h.grad, module.linear_qkv.weight.grad])
    finally:
        cfg.fused_single_qkv_rope = False
        attention_module.HAVE_FUSED_QKV_ROPE = had_flag
        if had_function is None:
            del attention_module.apply_fused_qkv_rotary_pos_emb
        else:
            attention_module.apply_fused_qkv_rotary_pos_emb = had_function
    assert calls == [torch.Size([257, 2, 2, 6 * 32])]  # the fused run took the unsplit path, once
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        _close(a, b, dtype, f"attention tensor {i}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_matches_upstream(megatron_parallel, dtype, smoothing) -> None:
    from megatron.core.tensor_parallel import cross_entropy as upstream

    from fl_patch.impls.flaggems import cross_entropy

    # contiguous: upstream .view()s fp32 logits (non-contiguous ones are covered op-level)
    logits = torch.randn(67, 4, 32000, device="cuda", dtype=dtype) * 3
    target = torch.randint(0, 32000, (67, 4), device="cuda")
    grad = torch.randn(4, 67, device="cuda").t()
    results = []
    for fn in (cross_entropy.vocab_parallel_cross_entropy, upstream.vocab_parallel_cross_entropy):
        x = logits.detach().clone().requires_grad_(True)
        loss = fn(x, target, smoothing)
        loss.backward(grad)
        results.append([loss, x.grad])
    assert results[0][0].dtype == torch.float32
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        _close(a, b, dtype, f"cross entropy tensor {i}")


# ---------------------------------------------------------------------------------- training
GPT_STEPS = 300
GPT_TAIL = 50


@pytest.mark.slow
def test_gpt_loss_curves_agree(run_python, tmp_path) -> None:
    """300 bf16 steps with and without the pack: the curves must agree.

    Tolerance (bf16 training with different rounding order drifts apart slowly):
    every 10-step window's mean loss within 2% (relative) of upstream's, the mean of
    the last 50 steps within 1%, and the loss must have fallen by half (the run learns).
    """
    outs = {}
    # keep what the caller put on PYTHONPATH (the GPU machine's wheels live there)
    pythonpath = os.pathsep.join(
        [str(REPO / "src"), str(SUPPORT / "flaggems"), str(SUPPORT), os.environ.get("PYTHONPATH", "")]
    )
    for name, env in (("pack", {"MG_FL_PREFER": "flaggems"}), ("upstream", {"FL_PATCH": "0"})):
        out = tmp_path / f"{name}.json"
        run_python(
            str(SUPPORT / "flaggems" / "gems_gpt.py"), "--mode", "curve", "--steps", str(GPT_STEPS), "--out", str(out),
            env=clean_env(PYTHONPATH=pythonpath, **env), timeout=600,
        )  # fmt: skip
        outs[name] = json.loads(out.read_text())
    pack, upstream = outs["pack"], outs["upstream"]
    out_file = os.environ.get("GEMS_CURVE_OUT")
    if out_file:  # the bench session keeps the curves whatever the verdict
        Path(out_file).write_text(json.dumps({"pack": pack["losses"], "upstream": upstream["losses"]}))
    assert pack["pack"] and not upstream["pack"]
    applied = {
        r["target"].rsplit(".", 2)[-2] + "." + r["target"].rsplit(".", 1)[-1]: r["status"]
        for r in pack["flaggems_report"]
    }
    for needed in (
        "torch_norm.WrappedTorchNorm",
        "MLP.forward",
        "rope_utils.apply_rotary_pos_emb",
        "DotProductAttention.forward",
        "cross_entropy.vocab_parallel_cross_entropy",
    ):
        assert applied.get(needed) == "applied", applied
    assert pack["fallbacks"] == [], pack["fallbacks"]
    a, b = pack["losses"], upstream["losses"]
    assert len(a) == len(b) == GPT_STEPS and all(math.isfinite(x) for x in a + b)
    for start in range(0, GPT_STEPS, 10):
        wa, wb = sum(a[start : start + 10]) / 10, sum(b[start : start + 10]) / 10
        assert abs(wa - wb) <= 0.02 * wb, f"steps {start}-{start + 9}: pack {wa:.4f} upstream {wb:.4f}"
    tail_a, tail_b = sum(a[-GPT_TAIL:]) / GPT_TAIL, sum(b[-GPT_TAIL:]) / GPT_TAIL
    assert abs(tail_a - tail_b) <= 0.01 * tail_b, (tail_a, tail_b)
    assert tail_b < 0.5 * b[0], "upstream did not learn: the comparison would be vacuous"


@pytest.mark.parametrize("splits", [[37, 0, 128, 5], [1, 1, 1, 1, 1, 1, 1, 1], [256]], ids=["odd", "tiny", "one"])
def test_te_grouped_gemm_matches_the_per_expert_loop(splits: list[int]) -> None:
    """TE's grouped GEMM on torch's grouped kernel: forward and every gradient equal the per-expert loop (fp32)."""
    from fl_patch.impls.flaggems import te

    g = torch.Generator(device="cpu").manual_seed(3)
    n = sum(splits)
    x0 = torch.randn(2 * n, 512, generator=g)[::2].to("cuda", torch.bfloat16)  # strided rows, as a slice gives
    w0 = [(torch.randn(384, 512, generator=g) / 20).to("cuda", torch.bfloat16) for _ in splits]
    dy = torch.randn(n, 384, generator=g).to("cuda", torch.bfloat16)
    if len(splits) > 1:
        assert te._grouped_reason(x0, w0) is None, te._grouped_reason(x0, w0)
    results = []
    for fn, dtype in (
        (te.grouped_matmul if len(splits) > 1 else te._grouped, torch.bfloat16),
        (te._loop, torch.float32),
    ):
        x = x0.detach().to(dtype, copy=True).requires_grad_(True)
        ws = [w.detach().to(dtype, copy=True).requires_grad_(True) for w in w0]
        out = fn(x, ws, splits)
        out.backward(dy.to(dtype))
        results.append([out, x.grad, *(w.grad for w in ws)])
    for i, (ours, ref) in enumerate(zip(*results, strict=True)):
        if ref.numel() and ref.abs().max() > 0:
            _close(ours, ref, torch.bfloat16, f"grouped GEMM tensor {i}")
        else:  # an expert without tokens: its gradient is zero
            assert ours.abs().max() == 0, f"grouped GEMM tensor {i}: not zero"


def _curve(run_python, tmp_path: Path, name: str, env: dict[str, str], *flags: str, steps: int = 150) -> dict:
    pythonpath = os.pathsep.join(
        [str(REPO / "src"), str(SUPPORT / "flaggems"), str(SUPPORT), os.environ.get("PYTHONPATH", "")]
    )
    out = tmp_path / f"{name}.json"
    run_python(
        str(SUPPORT / "flaggems" / "gems_gpt.py"), "--mode", "curve", "--steps", str(steps), "--out", str(out), *flags,
        env=clean_env(PYTHONPATH=pythonpath, **env), timeout=600,
    )  # fmt: skip
    return json.loads(out.read_text())


def _windows_agree(a: list[float], b: list[float], window_rel: float, tail_rel: float) -> None:
    assert len(a) == len(b) and all(math.isfinite(x) for x in a + b)
    for start in range(0, len(a), 10):
        wa, wb = sum(a[start : start + 10]) / 10, sum(b[start : start + 10]) / 10
        assert abs(wa - wb) <= window_rel * wb, f"steps {start}-{start + 9}: {wa:.4f} vs {wb:.4f}"
    tail_a, tail_b = sum(a[-GPT_TAIL:]) / GPT_TAIL, sum(b[-GPT_TAIL:]) / GPT_TAIL
    assert abs(tail_a - tail_b) <= tail_rel * tail_b, (tail_a, tail_b)
    assert tail_b < 0.7 * b[0], "the reference did not learn: the comparison would be vacuous"


def test_te_spec_on_the_pack_trains_as_the_local_spec_on_the_pack(run_python, tmp_path) -> None:
    """megatron's TE layer spec without TE (TE's module tree) on the pack's kernels, every call on them: its curve
    follows the local spec's on the pack (same initial weights; the same kernels in another module tree)."""
    pack = {"MG_FL_PREFER": "flaggems"}
    te_run = _curve(run_python, tmp_path, "te", pack, "--spec", "te")
    local = _curve(run_python, tmp_path, "local", pack)
    assert "TELayerNormColumnParallelLinear" in te_run["module_classes"] and local["module_classes"] == []
    assert te_run["fallbacks"] == [], te_run["fallbacks"]
    assert te_run["cudnn_attention_calls"] > 0
    _windows_agree(te_run["losses"], local["losses"], 0.01, 0.005)


def test_moe_te_grouped_on_the_pack_trains_as_the_same_modules_in_torch(run_python, tmp_path) -> None:
    """MoE, 4 experts top-2, alltoall, TE spec, grouped experts: on the pack (grouped GEMM, weighted SwiGLU and norm
    kernels, cuDNN attention) and with those four targets disabled (the TE-compatible modules' plain torch maths:
    a GEMM per expert, megatron's weighted SwiGLU, F.rms_norm, SDPA) on the same module tree and initial weights:
    the curves agree, and the model learns."""
    from fl_patch.impls.flaggems.registry import TE_PATCHES

    moe = ("--experts", "4", "--topk", "2", "--moe-ffn", "704", "--spec", "te", "--grouped-gemm", "--bias-act-fusion")
    pack = _curve(run_python, tmp_path, "pack", {"MG_FL_PREFER": "flaggems"}, *moe)
    disabled = ",".join(target for target, *_ in TE_PATCHES)
    plain = _curve(run_python, tmp_path, "plain", {"MG_FL_PREFER": "flaggems", "FL_PATCH_DISABLE": disabled}, *moe)
    assert "TEGroupedMLP" in pack["module_classes"] and pack["fallbacks"] == [], pack["fallbacks"]
    status = {r["target"]: r["status"] for r in plain["flaggems_report"]}
    assert {t: status.get(t) for t, *_ in TE_PATCHES} == {t: "disabled" for t, *_ in TE_PATCHES}, status
    _windows_agree(pack["losses"], plain["losses"], 0.02, 0.01)


def test_moe_permute_fusion_on_the_packs_kernels_trains_as_without(run_python, tmp_path) -> None:
    """``moe_permute_fusion`` and ``moe_router_fusion`` (TE's fused functions, served without TE): the tokens move
    on the pack's permute/unpermute kernels, nothing falls back, and the curve is the unfused run's."""
    moe = ("--experts", "4", "--topk", "2", "--moe-ffn", "704", "--spec", "te", "--grouped-gemm", "--bias-act-fusion")
    fused = _curve(run_python, tmp_path, "fused", {"MG_FL_PREFER": "flaggems"}, *moe, "--moe-fusion")
    plain = _curve(run_python, tmp_path, "plain", {"MG_FL_PREFER": "flaggems"}, *moe)
    assert fused["moe_fusion"] and not plain["moe_fusion"]
    assert fused["fallbacks"] == [], fused["fallbacks"]
    _windows_agree(fused["losses"], plain["losses"], 0.01, 0.005)


def test_mla_with_moe_on_the_pack_trains(run_python, tmp_path) -> None:
    """Multi-latent attention (q/kv LoRA, YaRN) with grouped MoE experts on the pack: it learns; its core attention
    (v's head size differs from q's and k's) goes to SDPA, said; nothing else leaves the pack's kernels (MLA's
    interleaved RoPE included)."""
    run = _curve(run_python, tmp_path, "mla", {"MG_FL_PREFER": "flaggems"}, "--spec", "te", "--mla", "--experts", "4",
                 "--grouped-gemm", "--bias-act-fusion", "--moe-ffn", "704")  # fmt: skip
    losses = run["losses"]
    assert "TELinear" in run["module_classes"] and "TEGroupedMLP" in run["module_classes"]
    assert all(math.isfinite(x) for x in losses) and sum(losses[-GPT_TAIL:]) / GPT_TAIL < 0.7 * losses[0], losses[::10]
    assert [f.rsplit(" (", 1)[0] for f in run["fallbacks"]] == [
        "te_attention: k and v of different shapes (multi-latent attention's v head size)"
    ], run["fallbacks"]


def test_megatrons_full_iteration_cuda_graph_replays_the_packs_kernels(run_python, tmp_path) -> None:
    """megatron-core's FullCudaGraphWrapper (forward+backward captured at step 4, replayed after) with the pack's
    kernels, deterministic mode, a new batch every step: the replayed run trains as the eager run of the same
    model and data; both stay on the pack's kernels (no fallback)."""
    pack = {"MG_FL_PREFER": "flaggems"}
    eager = _curve(run_python, tmp_path, "eager", pack, "--deterministic")
    graph = _curve(run_python, tmp_path, "graph", pack, "--deterministic", "--cuda-graph")
    assert graph["cuda_graph"] and not eager["cuda_graph"]
    assert graph["fallbacks"] == [] and eager["fallbacks"] == [], (graph["fallbacks"], eager["fallbacks"])
    worst = max(abs(a - b) / b for a, b in zip(graph["losses"], eager["losses"], strict=True))
    print(f"cuda graph vs eager: largest relative loss difference over 150 steps {worst:.3e}")
    _windows_agree(graph["losses"], eager["losses"], 0.005, 0.002)


def test_wgrad_accumulation_adds_the_fp32_product_into_main_grad_in_one_call() -> None:
    """fl_patch's stand-in for Apex's ``wgrad_gemm_accum_fp32`` (gradient_accumulation_fusion without Apex): on this
    torch the in-place mixed-precision addmm is trusted, and the sum is closer to fp64 than bf16's product added."""
    from fl_patch.impls.without_te import wgrad_accumulation

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(3, 101, 136, device="cuda", dtype=torch.bfloat16, generator=gen)  # [s, b, in], odd sizes
    g = torch.randn(3, 101, 200, device="cuda", dtype=torch.bfloat16, generator=gen)
    start = torch.randn(200, 136, device="cuda", generator=gen)
    main_grad = start.clone()
    pointer = main_grad.data_ptr()
    wgrad_accumulation.wgrad_gemm_accum_fp32(x, g, main_grad)
    assert wgrad_accumulation._in_place_trusted is True and main_grad.data_ptr() == pointer
    exact = start.double() + g.reshape(-1, 200).double().t() @ x.reshape(-1, 136).double()
    unfused = start + (g.reshape(-1, 200).t() @ x.reshape(-1, 136)).float()  # megatron without the fusion
    ours, theirs = (main_grad.double() - exact).abs().max().item(), (unfused.double() - exact).abs().max().item()
    assert ours < 1e-3 and ours < theirs / 4, (ours, theirs)


def test_gradient_accumulation_fusion_on_the_pack_trains_as_without(run_python, tmp_path) -> None:
    """gradient_accumulation_fusion=True (Megatron-LM's default, which needs Apex upstream) on the pack: weight
    gradients go into main_grad by one cuBLAS call each, nothing falls back, the curve is the unfused run's."""
    pack = {"MG_FL_PREFER": "flaggems"}
    fused = _curve(run_python, tmp_path, "fused", pack, "--grad-accum-fusion")
    plain = _curve(run_python, tmp_path, "plain", pack)
    assert fused["grad_accum_fusion"] and fused["wgrad_in_place"] is True and plain["wgrad_in_place"] is None
    assert fused["fallbacks"] == [], fused["fallbacks"]
    _windows_agree(fused["losses"], plain["losses"], 0.01, 0.005)


@pytest.mark.parametrize("patched", [True, False], ids=["patched", "upstream"])
def test_distributed_optimizer_checkpoint_resumes_the_packs_adam_exactly(run_python, patched: bool) -> None:
    """The pack's Adam (torch's, with ``step`` per parameter) behind megatron's distributed optimizer: a checkpoint of
    either sharding type loads and the run continues bit for bit; with the fixes disabled, upstream cannot even build
    the load's template (``assert len(steps) == 1`` in ``DistributedOptimizer.state_dict`` of a fresh optimizer)."""
    methods = ("state_dict", "load_state_dict", "_set_main_param_and_optimizer_states")
    targets = ",".join(f"megatron.core.optimizer.distrib_optimizer.DistributedOptimizer.{m}" for m in methods)
    env = {"MG_FL_PREFER": "flaggems", **({} if patched else {"FL_PATCH_DISABLE": targets})}
    pythonpath = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    proc = run_python(
        str(SUPPORT / "flaggems" / "gems_resume.py"),
        env=clean_env(PYTHONPATH=pythonpath, **env),
        timeout=300,
        check=patched,
    )
    if not patched:  # upstream: a fresh optimizer's template for the load already fails
        assert proc.returncode != 0 and "assert len(steps) == 1" in proc.stderr, proc.stderr[-2000:]
        return
    results = {r["sharding"]: r for r in map(json.loads, proc.stdout.strip().splitlines()[-2:])}
    assert set(results) == {"dp_reshardable", "fully_reshardable"}, proc.stdout[-2000:]
    for result in results.values():
        assert result["error"] is None, result
        assert result["steps"] == [2.0] and result["resumed_equal"], result
        assert "FusedAdam" in result["optimizer_mro"], result  # the pack's (installed under upstream's name)


# ---------------------------------------------------------------------------------- last: slowest to compile
def _has_flag_gems() -> bool:
    try:
        import flag_gems  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


@pytest.mark.skipif(not _has_flag_gems(), reason="flag_gems is not installed")
@pytest.mark.parametrize("case", gems_checks.flaggems_cases(), ids=lambda c: c.id)
def test_flaggems_backend_matches_torch_autograd(case: gems_checks.Case) -> None:
    result = gems_checks.check(case, "cuda")
    assert not result["problems"], _report(result)


def test_autotuned_attention_at_training_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    _knob(monkeypatch, "FL_GEMS_AUTOTUNE", "1")
    case = gems_checks.Case("attention", "bf16", "qkv_slice", (2048, 2048, 1, 16, 4, 128), {"causal": True})
    result = gems_checks.check(case, "cuda")
    assert not result["problems"], _report(result)


@pytest.mark.parametrize(
    "case",
    [
        gems_checks.Case("rms_norm", "bf16", "transposed", (2048, 4, 2048)),
        gems_checks.Case("layer_norm", "bf16", "contiguous", (16384, 4096)),
        gems_checks.Case("layer_norm", "bf16", "transposed", (2048, 4, 2048), {"bias": False}),
    ],
    ids=lambda c: c.id,
)
def test_autotuned_norms_at_training_shape(monkeypatch: pytest.MonkeyPatch, case: gems_checks.Case) -> None:
    # The tuner runs every backward config with its partial-sum reduction (a post-hook):
    # what it leaves behind must not leak into the result of the call being tuned.
    _knob(monkeypatch, "FL_GEMS_AUTOTUNE", "1")
    result = gems_checks.check(case, "cuda")
    assert not result["problems"], _report(result)


# ---------------------------------------------------------------------------------- launch path, tuning store, optimizer
def _every_op_once(offset: int) -> list[torch.Tensor]:
    """Forward and backward of each Triton-served op on seeded inputs starting ``offset`` elements into a buffer."""
    from fl_patch.impls.flaggems import ops
    from fl_patch.impls.flaggems._runtime import use_backend
    from fl_patch.impls.flaggems.kernels.softmax import scaled_masked_softmax

    gen = torch.Generator(device="cuda").manual_seed(7)

    def buf(*shape: int) -> torch.Tensor:
        n = math.prod(shape)
        base = torch.randn(n + offset, device="cuda", generator=gen).to(torch.bfloat16)
        return base[offset:].view(*shape).requires_grad_(True)

    outs: list[torch.Tensor] = []

    def fwd_bwd(fn, *inputs: torch.Tensor) -> None:
        y = fn(*inputs)
        y.backward(torch.randn(y.shape, device="cuda", generator=gen).to(y.dtype))
        outs.extend([y.detach(), *[t.grad for t in inputs if t.requires_grad]])

    w = (1 + 0.1 * torch.randn(520, device="cuda", generator=gen)).to(torch.bfloat16).requires_grad_(True)
    fwd_bwd(lambda x, w_: ops.rms_norm(x, w_, 1e-5), buf(37, 3, 520), w)
    fwd_bwd(lambda x, w_: ops.layer_norm(x, w_, None, 1e-5), buf(37, 520), w)
    fwd_bwd(ops.swiglu, buf(29, 2 * 352))
    freqs = torch.randn(33, 1, 1, 64, device="cuda", generator=gen)
    fwd_bwd(lambda t: ops.rotary(t, freqs, 1.0, False), buf(33, 2, 4, 64))
    fwd_bwd(lambda x: scaled_masked_softmax(x, None, True, 0.5, torch.bfloat16), buf(2, 3, 40, 40))
    target = torch.randint(0, 3001, (37,), device="cuda", generator=gen)
    fwd_bwd(lambda x: ops.cross_entropy(x, target, 0.0), buf(37, 3001))
    with use_backend("attention", "triton"):
        fwd_bwd(lambda q, k, v: ops.flash_attention(q, k, v, True, 0.125), buf(70, 2, 4, 64), buf(70, 2, 2, 64),
                buf(70, 2, 2, 64))  # fmt: skip
    return outs


def test_lean_launch_gives_what_triton_launch_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeated launches skip triton's binder; at every address alignment they compute what triton's path computes."""
    from fl_patch.impls.flaggems.kernels import _LEAN, LEAN_STATS

    _knob(monkeypatch, "FL_GEMS_LEAN_LAUNCH", "0")
    want = {offset: _every_op_once(offset) for offset in (0, 3)}  # 3 bf16 elements: 6-byte aligned pointers
    _knob(monkeypatch, "FL_GEMS_LEAN_LAUNCH", "1")
    _LEAN.clear()
    before = dict(LEAN_STATS)
    for offset in (0, 0, 3, 0, 3):  # first call of a signature through triton, the rest lean
        got = _every_op_once(offset)
        assert len(got) == len(want[offset])
        for i, (a, b) in enumerate(zip(got, want[offset], strict=True)):
            assert torch.equal(a, b), f"offset {offset}, tensor {i}"
    # 18 launches a round (norms 3 each, swiglu, rope, softmax, cross entropy 2 each, attention 4):
    # the first round at each alignment through triton, the other three lean
    lean, via_triton = (LEAN_STATS[k] - before[k] for k in ("lean", "triton"))
    assert lean + via_triton == 5 * 18 and lean >= 3 * 18 and via_triton == len(_LEAN) <= 2 * 18, (lean, via_triton)


_TUNE_SNIPPET = """
import json, sys, torch
from fl_patch.impls.flaggems import ops
from fl_patch.impls.flaggems.kernels import TUNE_STORE, norms
torch.manual_seed(0)  # the same input in both processes (the picks, and so dx, must then agree)
cols = int(sys.argv[1]) if len(sys.argv) > 1 else 1536
x = torch.randn(4096, cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
w = torch.ones(cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
y = ops.rms_norm(x, w, 1e-5)
y.backward(torch.ones_like(y))
picks = {t.fn.__name__: [str(c) for c in t.cache.values()] for t in (norms._RMS_FWD, norms._RMS_BWD)}
tuned = [t.fn.__name__ for t in (norms._RMS_FWD, norms._RMS_BWD) if hasattr(t, "configs_timings")]
print(json.dumps({"picks": picks, "tuned": tuned, "path": TUNE_STORE.path(), "dx": x.grad.float().sum().item()}))
"""


def test_autotune_picks_persist_across_processes(run_python, tmp_path) -> None:
    env = clean_env(
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        FL_GEMS_AUTOTUNE="1", FL_GEMS_AUTOTUNE_CACHE="1", FL_GEMS_AUTOTUNE_SEED="0", FL_GEMS_CACHE_DIR=str(tmp_path),
        FL_GEMS_TUNE_BUDGET_S="inf",  # tuning here is the point: no budget (tests/impls/test_flaggems_fp8.py tests it)
    )  # fmt: skip
    runs = []
    for _ in range(2):
        proc = run_python("-c", _TUNE_SNIPPET, env=env, check=False, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["tuned"] == ["_rms_fwd", "_rms_bwd"], runs  # a fresh store: both tuned
    assert second["tuned"] == [], runs  # the second process loaded the picks and benchmarked nothing
    assert second["picks"] == first["picks"] and second["dx"] == first["dx"], runs
    name = Path(first["path"]).name
    assert Path(first["path"]).parent == tmp_path and torch.cuda.get_device_name().replace(" ", "_") in name, runs
    # An unseen shape (1600 columns) borrows the nearest stored pick: nothing is tuned on its first step;
    # FL_GEMS_TUNE_UNSEEN=1 tunes it as before.
    unseen = run_python("-c", _TUNE_SNIPPET, "1600", env=env, check=False, timeout=300)
    assert unseen.returncode == 0, unseen.stderr[-4000:]
    assert json.loads(unseen.stdout.strip().splitlines()[-1])["tuned"] == [], unseen.stdout[-2000:]
    env_tune = {**env, "FL_GEMS_TUNE_UNSEEN": "1"}
    tuned = run_python("-c", _TUNE_SNIPPET, "1664", env=env_tune, check=False, timeout=300)
    assert tuned.returncode == 0, tuned.stderr[-4000:]
    assert json.loads(tuned.stdout.strip().splitlines()[-1])["tuned"] == ["_rms_fwd", "_rms_bwd"], tuned.stdout[-2000:]


def test_autotuned_cudnn_attention_at_training_shape() -> None:
    case = gems_checks.Case(
        "attention", "bf16", "qkv_slice", (2048, 2048, 1, 16, 8, 128), {"causal": True}, backend="cudnn"
    )
    result = gems_checks.check(case, "cuda")
    assert not result["problems"], _report(result)


@pytest.mark.parametrize("adam_w_mode", [True, False], ids=["adamw", "adam_l2"])
def test_fused_adam_on_the_gpu_equals_the_unfused_step(adam_w_mode: bool) -> None:
    from fl_patch.impls.flaggems.optimizer import FusedAdam

    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(2048, 517), (5632,), (3, 7, 11)]
    start = [torch.randn(s, device="cuda", generator=gen) for s in shapes]
    ours = [p.clone().requires_grad_(True) for p in start]
    theirs = [p.clone().requires_grad_(True) for p in start]
    fused = FusedAdam(ours, lr=1e-3, weight_decay=0.1, adam_w_mode=adam_w_mode)
    reference = (torch.optim.AdamW if adam_w_mode else torch.optim.Adam)(theirs, lr=1e-3, weight_decay=0.1)
    assert all(g["fused"] for g in fused.param_groups) and not reference.param_groups[0].get("fused")
    for _ in range(10):
        grads = [torch.randn(s, device="cuda", generator=gen) for s in shapes]
        for p, q, g in zip(ours, theirs, grads, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        fused.step()
        reference.step()
    for p, q in zip(ours, theirs, strict=True):
        torch.testing.assert_close(p, q, rtol=2e-6, atol=2e-7)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_vocab_parallel_cross_entropy_kernels_on_one_rank(megatron_parallel, dtype) -> None:
    """The vocabulary-parallel path's kernels on the GPU, over a group of one (the TP=2 arithmetic and its
    all-reduces run in Triton's interpreter under gloo, tests/impls/test_flaggems_interpret.py): upstream's loss and
    gradient, a target outside the vocabulary included, on strided logits."""
    from fl_patch.impls.flaggems import ops

    base = torch.randn(37, 3, 5001 + 7, device="cuda").to(dtype) * 3
    logits = base[..., 3 : 3 + 5001]
    target = torch.randint(0, 5001, (37, 3), device="cuda")
    target[0, 0] = 5001 + 5
    grad = torch.randn(3, 37, device="cuda").t()
    results = []
    for fn in (
        lambda x: ops.vocab_parallel_cross_entropy(
            x, target, megatron_parallel.get_tensor_model_parallel_group(), 0, 1
        ),
        lambda x: gems_checks.ref_cross_entropy(x, target, 0.0),
    ):
        x = logits.detach().clone().requires_grad_(True)
        loss = fn(x)
        loss.backward(grad)
        results.append([loss, x.grad])
    assert results[0][0].dtype == torch.float32
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        _close(a, b, dtype, f"vocab-parallel cross entropy tensor {i}")


def test_lean_launch_follows_a_grid_no_argument_carries(monkeypatch: pytest.MonkeyPatch) -> None:
    """RoPE's grid has a program row per position and no kernel argument holds the sequence length: two
    lengths share an argument signature. Each call must launch its own grid (the lean path once reused
    the first call's, reading past the shorter sequence: an illegal memory access on the H200)."""
    from fl_patch.impls.flaggems import ops

    def rotate(seq: int) -> torch.Tensor:
        gen = torch.Generator(device="cuda").manual_seed(seq)
        t = torch.randn(seq, 4, 16, 128, device="cuda", generator=gen).to(torch.bfloat16)
        freqs = torch.randn(seq, 1, 1, 128, device="cuda", generator=gen)
        return ops.rotary(t, freqs, 1.0, False)

    _knob(monkeypatch, "FL_GEMS_LEAN_LAUNCH", "0")
    want = {seq: rotate(seq) for seq in (64, 8, 200)}
    _knob(monkeypatch, "FL_GEMS_LEAN_LAUNCH", "1")
    for seq in (64, 64, 8, 200, 8):
        got = rotate(seq)
        torch.cuda.synchronize()
        assert torch.equal(got, want[seq]), seq
