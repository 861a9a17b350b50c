"""The FlagGems pack inside real megatron-core 0.19.2 on a CPU, kernels in Triton's interpreter.

Run by ``tests/impls/test_flaggems_interpret.py`` with ``TRITON_INTERPRET=1``,
``MG_FL_PREFER=flaggems`` and ``.cache/triton-cpu`` on PYTHONPATH (through ``gems_parts.py``,
first of the checks that share its process). fl_patch is
installed before megatron is imported, as ``python -m fl_patch`` would. Checks:
every target of the pack is applied; modules megatron builds carry the pack's
forward; each impl's result and gradients equal upstream's original function on
the same inputs where upstream runs on a CPU (MLP, RoPE, masked softmax, cross
entropy) and a float64 reference where it does not (core attention: upstream
allocates on "cuda"); an explicit causal mask takes the flash path; a fallback is
counted on every call and logged once. Prints one JSON line; exits non-zero on a
failed check.
"""

from __future__ import annotations

import inspect
import io
import json
import logging
import os
import sys

import fl_patch

fl_patch.install()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gems_checks import local_self_attention, ref_attention  # noqa: E402

log_stream = io.StringIO()
handler = logging.StreamHandler(log_stream)
logging.getLogger("fl_patch.flaggems").addHandler(handler)


def _runs_from(function: object, path: str) -> bool:
    """Whether ``function`` (fl_patch's function at a megatron name) runs the code of the impl in ``path``."""
    code = getattr(function, "__code__", None)
    return code is not None and code.co_filename.endswith(path)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def close(a: torch.Tensor, b: torch.Tensor, what: str, bound: float = 1e-5) -> None:
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    error = rel(a, b)
    assert error <= bound, f"{what}: relative difference {error:.3g} > {bound}"


def main() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("GEMS_PORT", "29531"))
    if not torch.distributed.is_initialized():  # gems_parts.py runs it after another check in one process
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    import megatron.core.fusions.fused_cross_entropy
    import megatron.core.optimizer  # noqa: F401  (the optimizer patches too)
    from megatron.core import tensor_parallel
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer import attention as attention_module
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.mlp import MLP, MLPSubmodules
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.utils import attention_mask_func

    from fl_patch.impls.flaggems import norm
    from fl_patch.impls.flaggems._runtime import FALLBACKS, reset_fallbacks
    from fl_patch.impls.flaggems.registry import CREATED, OPTIMIZER_PATCHES, PATCHES

    # the local spec's targets and the optimizer's, the pack's own and those of the shared pack without_te it
    # registers (the TE spec's: gems_te_interpret.py)
    own = {t for t, *_ in PATCHES + CREATED + OPTIMIZER_PATCHES}
    records = {
        r.target: r
        for r in fl_patch.report()
        if r.vendor == "flaggems" and (r.target in own or r.source == "fl_patch.impls.without_te.registry")
    }
    not_applied = {t: (r.status.value, r.detail) for t, r in records.items() if r.status.value != "applied"}
    assert not not_applied, not_applied
    # names bound elsewhere were rebound: attention.py calls the pack's RoPE, GPT's loss the pack's CE
    assert _runs_from(attention_module.apply_rotary_pos_emb, "fl_patch/impls/flaggems/rope.py")
    assert _runs_from(tensor_parallel.vocab_parallel_cross_entropy, "fl_patch/impls/flaggems/cross_entropy.py")

    cfg = TransformerConfig(
        num_layers=1, hidden_size=64, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=96,
        normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=True,
        bias_activation_fusion=False, masked_softmax_fusion=False, apply_rope_fusion=False,
        gradient_accumulation_fusion=False, attention_dropout=0.0, hidden_dropout=0.0, use_cpu_initialization=True,
    )  # fmt: skip
    torch.manual_seed(0)

    # Norm: megatron's builder gives the pack's module, numerically torch's RMSNorm.
    module = WrappedTorchNorm(config=cfg, hidden_size=64, eps=1e-5)
    assert type(module) is norm.FlagGemsRMSNorm and isinstance(module, torch.nn.RMSNorm)
    with torch.no_grad():
        module.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 5, 64).transpose(0, 1).requires_grad_(True)
    y = module(x)
    y.backward(torch.ones_like(y))
    x2 = x.detach().clone().requires_grad_(True)
    y2 = F.rms_norm(x2, (64,), module.weight, 1e-5)
    y2.backward(torch.ones_like(y2))
    close(y, y2, "rms_norm forward")
    close(x.grad, x2.grad, "rms_norm dx")

    # MLP (SwiGLU with fc1 bias): the pack's forward against upstream's on the same module.
    mlp = MLP(cfg, MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear))
    h = torch.randn(7, 2, 64)
    outs = []
    for fn in (MLP.forward, fl_patch.original("megatron.core.transformer.mlp.MLP.forward")):
        mlp.zero_grad(set_to_none=True)
        hi = h.clone().requires_grad_(True)
        out, out_bias = fn(mlp, hi)
        (out + out_bias).sum().backward()
        outs.append([out, hi.grad, mlp.linear_fc1.weight.grad, mlp.linear_fc1.bias.grad])
    assert _runs_from(MLP.forward, "fl_patch/impls/flaggems/mlp.py")
    for i, (a, b) in enumerate(zip(*outs, strict=True)):
        close(a, b, f"mlp tensor {i}")
    # As an MoE expert (SequentialMLP): upstream's forward (said once), with fc2's bias weighted by the routing.
    scale = torch.rand(7, 2, generator=torch.Generator().manual_seed(2))
    # an expert's linears communicate nothing (megatron sets this for experts): upstream's in-place bias add
    # would refuse the view a TP=1 RowParallelLinear returns
    mlp.linear_fc1.explicit_expert_comm = mlp.linear_fc2.explicit_expert_comm = True
    outs = []
    for fn in (MLP.forward, fl_patch.original("megatron.core.transformer.mlp.MLP.forward")):
        mlp.zero_grad(set_to_none=True)
        hi = h.clone().requires_grad_(True)
        out, out_bias = fn(mlp, hi, scale)
        assert out_bias is None
        out.sum().backward()
        outs.append([out, hi.grad, mlp.linear_fc1.weight.grad, mlp.linear_fc2.bias.grad])
    for i, (a, b) in enumerate(zip(*outs, strict=True)):
        close(a, b, f"mlp with per_token_scale, tensor {i}", 0.0)
    assert [k for k in FALLBACKS if k[0] == "swiglu"] == [
        ("swiglu", "per_token_scale (a SequentialMLP expert: torch's ops are faster at an expert's row count)")
    ], FALLBACKS
    reset_fallbacks()

    # RoPE: patched function against upstream's.
    freqs = torch.randn(9, 1, 1, 16)
    q = torch.randn(9, 2, 4, 3 * 24)[..., :24]
    outs = []
    for fn in (rope_utils.apply_rotary_pos_emb, fl_patch.original(rope_utils.__name__ + ".apply_rotary_pos_emb")):
        t = q.clone().requires_grad_(True)
        r = fn(t, freqs, cfg, mscale=1.1)
        r.backward(torch.randn(9, 2, 4, 24, generator=torch.Generator().manual_seed(1)))
        outs.append([r, t.grad])
    for i, (a, b) in enumerate(zip(*outs, strict=True)):
        close(a, b, f"rope tensor {i}", 1e-6)
    # MLA's interleaved RoPE (YaRN's mscale), a rotary part narrower than the head: the pack against upstream
    # (a parameter of megatron-core 0.18 on: earlier releases never pass it)
    reset_fallbacks()
    upstream_rope = fl_patch.original(rope_utils.__name__ + ".apply_rotary_pos_emb")
    if "mla_rotary_interleaved" in inspect.signature(upstream_rope).parameters:
        outs = []
        for fn in (rope_utils.apply_rotary_pos_emb, upstream_rope):
            t = q.clone().requires_grad_(True)
            r = fn(t, freqs[..., :8], cfg, mscale=1.3, mla_rotary_interleaved=True)
            r.backward(torch.randn(9, 2, 4, 24, generator=torch.Generator().manual_seed(5)))
            outs.append([r, t.grad])
        for i, (a, b) in enumerate(zip(*outs, strict=True)):
            close(a, b, f"mla rope tensor {i}", 1e-6)
    assert not FALLBACKS, FALLBACKS

    # Fused QKV RoPE: a SelfAttention upstream built, with fused_single_qkv_rope on (the pack's
    # one-launch function, which megatron refuses to use without TE) and off (the split path).
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    assert attention_module.HAVE_FUSED_QKV_ROPE is True
    fused_fn = attention_module.apply_fused_qkv_rotary_pos_emb
    assert _runs_from(fused_fn, "fl_patch/impls/flaggems/rope.py")
    self_attention = local_self_attention(cfg)
    emb = RotaryEmbedding(kv_channels=16, rotary_percent=1.0, use_cpu_initialization=True)(11)
    hidden = torch.randn(11, 2, 64)
    out_grad = torch.randn(11, 2, 64, generator=torch.Generator().manual_seed(4))
    calls: list[tuple] = []

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(tuple(a.shape if isinstance(a, torch.Tensor) else a for a in args))
        return fused_fn(*args, **kwargs)

    attention_module.apply_fused_qkv_rotary_pos_emb = counting
    outs = []
    try:
        for fused in (True, False):
            cfg.fused_single_qkv_rope = fused
            self_attention.zero_grad(set_to_none=True)
            h = hidden.clone().requires_grad_(True)
            out, _ = self_attention(h, attention_mask=None, rotary_pos_emb=(emb, emb))
            out.backward(out_grad)
            outs.append([out, h.grad, self_attention.linear_qkv.weight.grad, self_attention.linear_qkv.bias.grad])
    finally:
        attention_module.apply_fused_qkv_rotary_pos_emb = fused_fn
        cfg.fused_single_qkv_rope = False
    assert len(calls) == 1 and calls[0][0] == (11, 2, 2, 4 * 16), calls  # the fused path ran once, unsplit
    for i, (a, b) in enumerate(zip(*outs, strict=True)):
        close(a, b, f"fused qkv rope vs split, tensor {i}")
    # What it does not cover: float64 runs the split fallback (said once); context parallelism raises.
    reset_fallbacks()
    mixed64 = torch.randn(11, 2, 2, 4 * 16, dtype=torch.float64)
    got64 = fused_fn(mixed64, emb, emb, [32, 16, 16])
    got32 = fused_fn(mixed64.float(), emb, emb, [32, 16, 16])
    for i, (a, b) in enumerate(zip(got64, got32, strict=True)):
        close(a, b, f"fused qkv rope fallback, tensor {i}")
    assert FALLBACKS == {("qkv_rope", "dtype torch.float64"): 1}, FALLBACKS
    # Query and key rotated over different widths: upstream's split path, said once.
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd

    reset_fallbacks()
    m32 = mixed64.float()
    k_emb = emb[..., :8].contiguous()
    got = fused_fn(m32, emb, k_emb, [32, 16, 16])
    want = (
        _apply_rotary_pos_emb_bshd(m32[..., :32].reshape(11, 2, 4, 16), emb),
        _apply_rotary_pos_emb_bshd(m32[..., 32:48], k_emb),
        m32[..., 48:],
    )
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        close(a, b, f"fused qkv rope, two rotary widths, tensor {i}", 0.0)
    assert FALLBACKS == {("qkv_rope", "query and key rotary widths differ"): 1}, FALLBACKS
    try:
        fused_fn(mixed64.float(), emb, emb, [32, 16, 16], cp_size=2)
        raise AssertionError("cp_size=2 was accepted")
    except NotImplementedError as exc:
        assert "apply_fused_qkv_rotary_pos_emb" in str(exc) and "cp_size=2" in str(exc), exc

    # Core attention: no mask (causal type), and an explicit causal mask, against float64.
    attn = DotProductAttention(cfg, 1, AttnMaskType.causal, "self")
    mixed = torch.randn(11, 2, 2, 4 * 16, dtype=torch.float32)
    qq = mixed[..., :32].reshape(11, 2, 4, 16)
    kk, vv = mixed[..., 32:48], mixed[..., 48:]
    expected = ref_attention(qq.double(), kk.double(), vv.double(), True, 0.25).reshape(11, 2, 64)
    causal_mask = torch.ones(1, 1, 11, 11, dtype=torch.bool).triu(1)
    reset_fallbacks()
    for mask in (None, causal_mask):
        got = attn(qq, kk, vv, mask)
        close(got, expected, f"attention (mask {'none' if mask is None else 'causal tensor'})")
    assert not FALLBACKS, FALLBACKS

    # Masked softmax (explicit mask: upstream runs on CPU) against upstream.
    softmax = FusedScaleMaskSoftmax(False, False, AttnMaskType.padding, False, attention_mask_func, True, 0.5)
    scores = torch.randn(2, 3, 9, 13)
    mask = torch.rand(2, 1, 9, 13) > 0.6
    outs = []
    for fn in (
        FusedScaleMaskSoftmax.forward,
        fl_patch.original(FusedScaleMaskSoftmax.__module__ + ".FusedScaleMaskSoftmax.forward"),
    ):
        s = scores.clone().requires_grad_(True)
        p = fn(softmax, s, mask)
        p.backward(torch.randn(2, 3, 9, 13, generator=torch.Generator().manual_seed(2)))
        outs.append([p, s.grad])
    for i, (a, b) in enumerate(zip(*outs, strict=True)):
        close(a, b, f"softmax tensor {i}")

    # Cross entropy (TP=1, label smoothing) against upstream.
    logits = torch.randn(5, 2, 301) * 3  # contiguous: upstream .view()s fp32 logits
    target = torch.randint(0, 301, (5, 2))
    outs = []
    for fn in (
        tensor_parallel.vocab_parallel_cross_entropy,
        fl_patch.original("megatron.core.tensor_parallel.cross_entropy.vocab_parallel_cross_entropy"),
    ):
        lg = logits.detach().clone().requires_grad_(True)  # upstream subtracts the max in place
        loss = fn(lg, target, 0.1)
        loss.backward(torch.randn(2, 5, generator=torch.Generator().manual_seed(3)).t())
        outs.append([loss, lg.grad])
    for i, (a, b) in enumerate(zip(*outs, strict=True)):
        close(a, b, f"cross entropy tensor {i}")

    # A whole GPTModel (local spec, 2 layers): fused_single_qkv_rope on and off, same loss and gradients.
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    calls.clear()
    attention_module.apply_fused_qkv_rotary_pos_emb = counting
    tokens = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(5))
    position_ids = torch.arange(16).unsqueeze(0).expand(2, 16)
    runs = []
    try:
        for fused in (True, False):
            torch.manual_seed(6)
            gpt_cfg = TransformerConfig(
                num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=96,
                normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
                bias_activation_fusion=False, masked_softmax_fusion=False, apply_rope_fusion=False,
                gradient_accumulation_fusion=False, attention_dropout=0.0, hidden_dropout=0.0,
                use_cpu_initialization=True, fused_single_qkv_rope=fused,
            )  # fmt: skip
            gpt = GPTModel(
                config=gpt_cfg, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                vocab_size=128, max_sequence_length=16, position_embedding_type="rope",
            )  # fmt: skip
            loss = gpt(tokens, position_ids, None, labels=tokens).float().mean()
            loss.backward()
            runs.append([loss.detach(), *[p.grad for p in gpt.parameters()]])
    finally:
        attention_module.apply_fused_qkv_rotary_pos_emb = fused_fn
    assert len(calls) == 2, calls  # one fused call per layer, in the fused run only
    for i, (a, b) in enumerate(zip(*runs, strict=True)):
        close(a, b, f"GPT fused vs split, tensor {i}")

    # A call the pack does not cover: upstream runs, counted each time, logged once.
    reset_fallbacks()
    x64 = torch.randn(4, 64, dtype=torch.float64)
    module64 = WrappedTorchNorm(config=cfg, hidden_size=64, eps=1e-5).double()
    for _ in range(3):
        close(module64(x64), F.rms_norm(x64, (64,), module64.weight, 1e-5), "fallback rms_norm", 0.0)
    assert FALLBACKS == {("rms_norm", "dtype torch.float64"): 3}, FALLBACKS
    logged = [line for line in log_stream.getvalue().splitlines() if "rms_norm" in line]
    assert len(logged) == 1 and "dtype torch.float64" in logged[0], logged
    print(json.dumps({"ok": True, "targets": sorted(records)}))


if __name__ == "__main__":
    main()
