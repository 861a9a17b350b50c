"""The kernels that make the fp8 casts of what they write (``fp8_swiglu.py``, ``fp8_norm.py``), in Triton's interpreter.

Run by ``tests/impls/test_flaggems_fp8.py`` with ``TRITON_INTERPRET=1`` and ``MG_FL_PREFER=flaggems``. Checks:
1. the SwiGLU kernels (``kernels/swiglu_fp8.py``) against the plain SwiGLU kernel followed by the cast kernels, bit
   for bit: output and input gradient, amax, and under delayed scaling the fp8 copy, its transpose and the decode
   scale, for both formats, with and without bias, at sizes that leave partial tiles; the norms' amax variants
   (``kernels/norms.py``): RMSNorm and LayerNorm (with and without bias) output, statistics' gradients and amax
   against the plain kernels and max |y|;
2. megatron's TE-spec GPT in fp8 (tensorwise and delayed; one layer, 16 tokens), two forward/backward passes with
   the casts made by the producing kernels (the SwiGLU's for both recipes, the norms' for tensorwise) and without
   (``fp8_swiglu.ENABLED``, ``fp8_norm.ENABLED``): the same loss, gradients and delayed-scaling state bit for bit,
   and the casts counted as made by the producers; under tensorwise also with the norms' alone (their count alone).
Prints one JSON line; exits non-zero on a failed check.
"""

from __future__ import annotations

import json
import os
import sys

import fl_patch

fl_patch.install()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype in (E4M3, E5M2):
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return a.shape == b.shape and torch.equal(a, b)


def kernels(device: torch.device) -> dict[str, bool]:
    from fl_patch.impls.flaggems import fp8_quant as fq
    from fl_patch.impls.flaggems.kernels import swiglu_fp8
    from fl_patch.impls.flaggems.kernels.swiglu import SwiGLUFunction

    checks: dict[str, bool] = {}
    g = torch.Generator().manual_seed(3)
    m, half = 70, 200  # partial tiles in both directions (64 x 128)
    for with_bias in (False, True):
        y = (torch.randn(m, 2 * half, generator=g) * torch.logspace(-3, 1, 2 * half)).to(device, torch.bfloat16)
        bias = (torch.randn(2 * half, generator=g) * 0.1).to(device, torch.bfloat16) if with_bias else None
        dout = (torch.randn(m, half, generator=g) * 1e-2).to(device, torch.bfloat16)
        yy = y.clone().requires_grad_(True)
        plain = SwiGLUFunction.apply(yy, bias)
        plain.backward(dout)
        plain_dy = yy.grad
        for dtype in (E4M3, E5M2):
            tag = f"{'bias' if with_bias else 'nobias'}_{str(dtype)[-4:]}"
            # forward, current scaling: the output and its amax
            out, slots = torch.empty(m, half, dtype=torch.bfloat16, device=device), fq.scale_slots(device)
            swiglu_fp8.forward(y, bias, out, dtype=dtype, amax=slots[1:2])
            checks[f"fwd_out_{tag}"] = same(out, plain.detach())
            checks[f"fwd_amax_{tag}"] = same(slots[1:2], plain.detach().abs().amax().float().reshape(1))
            q_cur, qt_cur = fq.quantize_tensorwise(out, dtype, 1, transposed=True, slots=slots)
            q_ref, qt_ref = fq.quantize_tensorwise(plain.detach(), dtype, 1, transposed=True)
            assert q_cur is not None and qt_cur is not None and q_ref is not None and qt_ref is not None
            checks[f"fwd_current_cast_{tag}"] = same(q_cur.data, q_ref.data) and same(qt_cur.data, qt_ref.data)
            checks[f"fwd_current_scale_{tag}"] = same(q_cur.scale_inv, q_ref.scale_inv)
            # forward, delayed scaling: the fp8 copies at a given scale
            scale = torch.tensor([fq.fp8_max(dtype) / 3.0], device=device)
            out2, slots2 = torch.empty(m, half, dtype=torch.bfloat16, device=device), fq.scale_slots(device)
            q = torch.empty(m, half, dtype=dtype, device=device)
            qt = torch.empty(half, m, dtype=dtype, device=device)
            swiglu_fp8.forward(
                y, bias, out2, dtype=dtype, amax=slots2[1:2], scale=scale, scale_inv=slots2[0:1], q=q, qt=qt
            )
            ref_amax = torch.zeros(1, device=device)
            dq, dqt = fq.quantize_delayed(plain.detach(), dtype, scale, ref_amax, transposed=True)
            assert dq is not None and dqt is not None
            checks[f"fwd_delayed_{tag}"] = (
                same(out2, plain.detach()) and same(q, dq.data) and same(qt, dqt.data)
                and same(slots2[0:1], dq.scale_inv) and same(slots2[1:2], ref_amax)
            )  # fmt: skip
            # backward: the input gradient and its amax; delayed: its fp8 copies
            dy, slots3 = torch.empty(m, 2 * half, dtype=torch.bfloat16, device=device), fq.scale_slots(device)
            swiglu_fp8.backward(y, bias, dout, dy, dtype=dtype, amax=slots3[1:2])
            checks[f"bwd_dy_{tag}"] = same(dy, plain_dy)
            checks[f"bwd_amax_{tag}"] = same(slots3[1:2], plain_dy.abs().amax().float().reshape(1))
            dy4, slots4 = torch.empty(m, 2 * half, dtype=torch.bfloat16, device=device), fq.scale_slots(device)
            q4 = torch.empty(m, 2 * half, dtype=dtype, device=device)
            qt4 = torch.empty(2 * half, m, dtype=dtype, device=device)
            swiglu_fp8.backward(
                y, bias, dout, dy4, dtype=dtype, amax=slots4[1:2], scale=scale, scale_inv=slots4[0:1], q=q4, qt=qt4
            )
            ref_amax4 = torch.zeros(1, device=device)
            gq, gqt = fq.quantize_delayed(plain_dy, dtype, scale, ref_amax4, transposed=True)
            assert gq is not None and gqt is not None
            checks[f"bwd_delayed_{tag}"] = (
                same(dy4, plain_dy) and same(q4, gq.data) and same(qt4, gqt.data)
                and same(slots4[0:1], gq.scale_inv) and same(slots4[1:2], ref_amax4)
            )  # fmt: skip
    from fl_patch.impls.flaggems.kernels import norms

    for width, with_bias in ((200, False), (96, True)):
        x = (torch.randn(37, width, generator=g) * 3).to(device, torch.bfloat16)
        w = (torch.rand(width, generator=g) + 0.5).to(device, torch.bfloat16)
        b = (torch.randn(width, generator=g) * 0.1).to(device, torch.bfloat16) if with_bias else None
        dy = torch.randn(37, width, generator=g).to(device, torch.bfloat16)
        for kind in ("rms", "ln"):
            if kind == "rms" and with_bias:
                continue
            outs = []
            for slot in (None, fq.scale_slots(device)[1:2]):
                xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
                bb = b.clone().requires_grad_(True) if b is not None else None
                amax = None if slot is None else slot
                y = norms.rms_norm(xx, ww, 1e-5, amax) if kind == "rms" else norms.layer_norm(xx, ww, bb, 1e-5, amax)
                y.backward(dy)
                outs.append((y.detach(), xx.grad, ww.grad, slot))
            (y0, dx0, dw0, _), (y1, dx1, dw1, slot1) = outs
            tag = f"{kind}_{width}{'_bias' if with_bias else ''}"
            checks[f"norm_out_{tag}"] = same(y0, y1) and same(dx0, dx1) and same(dw0, dw1)
            checks[f"norm_amax_{tag}"] = slot1 is not None and same(slot1, y0.abs().amax().float().reshape(1))
    return checks


def fp8_state(extra: torch.Tensor | None) -> dict[str, list] | None:
    """A layer's ``_extra_state`` (TE's layout: a pickled dict for delayed scaling) as plain lists of its tensors."""
    if extra is None or not extra.numel():
        return None
    import pickle

    loaded = pickle.loads(extra.numpy().tobytes())
    return {k: v.tolist() for k, v in loaded.items() if isinstance(v, torch.Tensor)}


def megatron() -> dict[str, object]:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("GEMS_PORT", "29578"))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    from fl_patch.impls.flaggems import fp8, fp8_norm, fp8_swiglu

    parallel_state.initialize_model_parallel(1, 1)
    # 16 tokens, the fewest an fp8 GEMM takes (a multiple of 16): the interpreter's cost is per program, and the
    # row-wise kernels (the plain SwiGLU, cross entropy) run one a token; what is compared (bit for bit, and the
    # casts counted per layer and pass) does not depend on the token count
    seq, batch, vocab = 8, 2, 128

    def build(**cfg: object) -> GPTModel:
        # one layer: every producer casts for a linear of its own layer (the norm inside the QKV projection's and
        # fc1's module, the SwiGLU between fc1 and fc2), so a second layer repeats the same pairs; the final norm
        # still follows it, and the second pass shows that nothing the first left behind is taken
        torch.manual_seed(1)
        model_parallel_cuda_manual_seed(1)
        config = TransformerConfig(
            num_layers=1, hidden_size=64, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=128,
            use_cpu_initialization=True, normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu,
            add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0, bias_activation_fusion=False,
            apply_rope_fusion=False, bf16=True, params_dtype=torch.bfloat16, **cfg,
        )  # fmt: skip
        spec = get_gpt_layer_with_transformer_engine_spec()
        model = GPTModel(
            config=config, transformer_layer_spec=spec, vocab_size=vocab, max_sequence_length=seq,
            position_embedding_type="rope",
        )  # fmt: skip
        return model.to(torch.bfloat16)

    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, vocab, (batch, seq + 1), generator=gen) for _ in range(2)]
    positions = torch.arange(seq).expand(batch, seq)

    def run(
        model: GPTModel, swiglu: bool, norm: bool
    ) -> tuple[list[float], dict[str, torch.Tensor], dict[str, torch.Tensor], int]:
        fp8_swiglu.ENABLED.clear()
        if swiglu:
            fp8_swiglu.ENABLED.update(("tensorwise", "delayed"))
        fp8_norm.ENABLED = norm
        fp8.STATS["casts_from_producers"] = 0
        losses, grads = [], {}
        for tokens in batches:  # two passes: the second casts with the scales the first recorded (delayed)
            model.zero_grad(set_to_none=True)
            loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
            loss.backward()
            losses.append(loss.item())
            for n, p in model.named_parameters():
                grads[f"{n}@{len(losses)}"] = p.grad.clone()
        state = {n: t for n, t in model.state_dict().items() if n.endswith("_extra_state")}
        return losses, grads, state, fp8.STATS["casts_from_producers"]

    out: dict[str, object] = {}
    for name, cfg in (
        ("tensorwise_hybrid", dict(fp8="hybrid", fp8_recipe="tensorwise")),
        ("delayed_hybrid", dict(fp8="hybrid", fp8_recipe="delayed", fp8_amax_history_len=4, fp8_amax_compute_algo="max")),
        ("delayed_e4m3_margin_bf16_wgrad", dict(fp8="e4m3", fp8_recipe="delayed", fp8_margin=1, fp8_wgrad=False)),
        # the MLP recomputed in backward (TE's checkpoint, served by the pack): its first forward runs under no_grad
        ("tensorwise_recompute_mlp", dict(fp8="hybrid", fp8_recipe="tensorwise", recompute_granularity="selective",
                                          recompute_modules=["mlp"])),
    ):  # fmt: skip
        with_casts, without = build(**cfg), build(**cfg)
        without.load_state_dict(with_casts.state_dict())
        losses_on, grads_on, state_on, made = run(with_casts, True, True)
        losses_off, grads_off, state_off, made_off = run(without, False, False)
        differing = [n for n in grads_off if not same(grads_on[n], grads_off[n])]
        state_same = all(fp8_state(state_on[n]) == fp8_state(state_off[n]) for n in state_off)
        stateful = sum(1 for t in state_off.values() if t is not None and t.numel())
        out[name] = {
            "losses": losses_on, "losses_without": losses_off, "differing_grads": differing[:5],
            "grads_compared": len(grads_off), "state_same": state_same, "stateful": stateful, "made": made, "made_without": made_off,
        }  # fmt: skip
        if name == "tensorwise_hybrid":  # the norms' casts alone
            norms_only = build(**cfg)
            norms_only.load_state_dict(with_casts.state_dict())
            losses_n, grads_n, _, made_n = run(norms_only, False, True)
            out[name].update(
                made_norms_only=made_n, losses_norms_only=losses_n,
                differing_norms_only=[n for n in grads_off if not same(grads_n[n], grads_off[n])][:5],
            )  # fmt: skip
    return out


def main() -> None:
    """``--kernels-only [--device cuda]``: part 1 alone (the GPU test: the hardware's fp8 conversion)."""
    device = torch.device(sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu")
    result: dict[str, object] = {"kernels": kernels(device)}
    if "--kernels-only" not in sys.argv:
        result["megatron"] = megatron()
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
