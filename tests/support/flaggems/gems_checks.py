"""Forward and backward of every op of the FlagGems pack against torch autograd.

Shared by the GPU tests (``tests/impls/test_flaggems_gpu.py``, CUDA tensors) and the CPU
interpreter tests (``tests/impls/test_flaggems_interpret.py`` runs ``python gems_checks.py``
with ``TRITON_INTERPRET=1`` and the triton of ``.cache/triton-cpu``).

For each case: random inputs in the case's dtype and layout (contiguous, or strided
views: transposed rows, sliced rows, q/k/v slices of a fused projection), a random
output gradient (non-contiguous when the layout is), then three results:
``ours`` (the pack's op, through ``fl_patch.impls.flaggems.ops``), ``torch``
(torch autograd of upstream's formulation in the same dtype) and ``ref`` (the same
formulation in float64). The pack passes when, for the output and every input
gradient, its relative error to ``ref`` (norm(ours - ref) / norm(ref)) is at most twice
torch's own or a floor (1e-5 fp32, 1e-2 bf16), and its largest elementwise error is
at most four times torch's plus the floor times max|ref|; NaN never passes.
"""

from __future__ import annotations

import json
import math
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
FLOOR = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


@dataclass
class Case:
    op: str
    dtype: str
    layout: str  # "contiguous" or a strided layout
    dims: tuple[int, ...]
    extra: dict[str, object] = field(default_factory=dict)
    backend: str = "triton"

    @property
    def id(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.extra.items()))
        return f"{self.op}[{self.backend}]-{self.dtype}-{self.layout}-{'x'.join(map(str, self.dims))}" + (
            f"-{extra}" if extra else ""
        )


# ---------------------------------------------------------------------------------- inputs
def _rand(shape: tuple[int, ...], dtype: torch.dtype, device: str, layout: str) -> torch.Tensor:
    """Random tensor of ``shape`` in ``layout``: contiguous, 'transposed' (first two dims swapped in memory), 'sliced' (rows of a wider buffer)."""
    if layout == "contiguous" or len(shape) < 2:
        return torch.randn(shape, dtype=torch.float32, device=device).to(dtype)
    if layout == "transposed":
        base = torch.randn((shape[1], shape[0], *shape[2:]), dtype=torch.float32, device=device).to(dtype)
        return base.transpose(0, 1)
    if layout == "sliced":
        base = torch.randn((*shape[:-1], shape[-1] + 7), dtype=torch.float32, device=device).to(dtype)
        return base[..., 3 : 3 + shape[-1]]
    if layout == "strided_last":
        base = torch.randn((*shape[:-1], shape[-1] * 2), dtype=torch.float32, device=device).to(dtype)
        return base[..., ::2]
    raise ValueError(layout)


def _grad_like(t: torch.Tensor, layout: str) -> torch.Tensor:
    """An output gradient; non-contiguous (reversed-dims memory) unless the layout is contiguous."""
    if layout == "contiguous" or t.dim() < 2:
        return torch.randn(t.shape, device=t.device, dtype=torch.float32).to(t.dtype)
    base = torch.randn(tuple(reversed(t.shape)), device=t.device, dtype=torch.float32).to(t.dtype)
    return base.permute(*reversed(range(t.dim())))


def _leaf(t: torch.Tensor | None, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """A differentiable leaf copy of ``t``: same strides in ``t``'s dtype, or compacted in ``dtype``.

    Non-float tensors (masks, targets) are constants: passed as they are.
    """
    if t is None or not t.is_floating_point():
        return t
    if dtype is not None:
        return t.detach().to(dtype).requires_grad_(True)
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    out.copy_(t.detach())
    return out.requires_grad_(True)


# ---------------------------------------------------------------------------------- references
def ref_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def ref_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def ref_swiglu(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if bias is not None:
        y = y + bias
    a, g = torch.chunk(y, 2, dim=-1)
    return F.silu(a) * g


def ref_rope(t: torch.Tensor, freqs: torch.Tensor, mscale: float, interleaved: bool) -> torch.Tensor:
    """megatron-core 0.19.2 ``_apply_rotary_pos_emb_bshd`` (cos/sin rounded to t's dtype, as upstream)."""
    rot = freqs.shape[-1]
    t_rot, t_pass = t[..., :rot], t[..., rot:]
    cos = (torch.cos(freqs) * mscale).to(t.dtype)
    sin = (torch.sin(freqs) * mscale).to(t.dtype)
    if interleaved:
        x1, x2 = t_rot[..., ::2], t_rot[..., 1::2]
        rotated = torch.stack((-x2, x1), dim=-1).reshape(t_rot.shape)
    else:
        x1, x2 = torch.chunk(t_rot, 2, dim=-1)
        rotated = torch.cat((-x2, x1), dim=-1)
    return torch.cat((t_rot * cos + rotated * sin, t_pass), dim=-1)


def ref_qkv_rope(
    mixed: torch.Tensor, q_freqs: torch.Tensor, k_freqs: torch.Tensor, g: int, hn: int, interleaved: bool
) -> torch.Tensor:
    """megatron-core 0.19.2's split path: split the fused QKV, reshape the query, RoPE query and key.

    The three results are returned flattened into one tensor (one output gradient for the checks).
    """
    s, b, ng, _ = mixed.shape
    q, k, v = torch.split(mixed, [g * hn, hn, hn], dim=3)
    q = ref_rope(q.reshape(s, b, ng * g, hn), q_freqs, 1.0, interleaved)
    k = ref_rope(k, k_freqs, 1.0, interleaved)
    return torch.cat([q.flatten(), k.flatten(), v.flatten()])


def local_self_attention(config: object) -> torch.nn.Module:
    """A causal SelfAttention built from megatron's local-spec pieces (linear QKV, core attention, projection)."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    submodules = SelfAttentionSubmodules(
        linear_qkv=ColumnParallelLinear, core_attention=DotProductAttention, linear_proj=RowParallelLinear
    )
    return SelfAttention(config, submodules, layer_number=1, attn_mask_type=AttnMaskType.causal)


def ref_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """Upstream ``DotProductAttention`` math: repeat K/V, scores, fp32 softmax with -10000 mask, probs in q's dtype."""
    sq, hq = q.shape[0], q.shape[2]
    sk, hkv = k.shape[0], k.shape[2]
    group = hq // hkv
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    scores = torch.einsum("qbhd,kbhd->bhqk", q, k) * scale
    probs_in = scores.float() if scores.dtype != torch.float64 else scores
    if causal:
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).triu(1)
        probs_in = probs_in.masked_fill(mask, -10000.0)
    probs = torch.softmax(probs_in, dim=-1).to(q.dtype)
    return torch.einsum("bhqk,kbhd->qbhd", probs, v)


def ref_softmax(x: torch.Tensor, mask: torch.Tensor | None, causal: bool, scale: float, out_dtype: torch.dtype):
    """Upstream ``forward_torch_softmax``: fp32, scale, masked_fill(-10000), softmax, cast."""
    s = x.float() if x.dtype != torch.float64 else x
    s = s * scale
    if causal:
        mask = torch.ones(x.shape[-2], x.shape[-1], dtype=torch.bool, device=x.device).triu(1)
    if mask is not None:
        s = s.masked_fill(mask, -10000.0)
    probs = torch.softmax(s, dim=-1)
    return probs if x.dtype == torch.float64 else probs.to(out_dtype)


class _UpstreamCE(torch.autograd.Function):
    """Upstream ``_VocabParallelCrossEntropy`` at TP=1 (its custom backward: softmax minus one-hot)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, label_smoothing: float) -> torch.Tensor:
        x = logits.float() if logits.dtype != torch.float64 else logits.clone()
        vocab = x.shape[-1]
        x = x - x.max(dim=-1, keepdim=True)[0]
        valid = (target >= 0) & (target < vocab)
        safe = torch.where(valid, target, torch.zeros_like(target))
        predicted = torch.where(
            valid, x.gather(-1, safe.unsqueeze(-1)).squeeze(-1), torch.zeros((), dtype=x.dtype, device=x.device)
        )
        exp = x.exp()
        sum_exp = exp.sum(-1)
        loss = sum_exp.log() - predicted
        softmax = exp / sum_exp.unsqueeze(-1)
        smoothing = label_smoothing * vocab / (vocab - 1) if label_smoothing > 0 else 0.0
        if smoothing > 0:
            loss = (1.0 - smoothing) * loss - smoothing * softmax.log().mean(-1)
        ctx.save_for_backward(softmax, valid, safe)
        ctx.smoothing, ctx.vocab, ctx.in_dtype = smoothing, vocab, logits.dtype
        return loss

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        softmax, valid, safe = ctx.saved_tensors
        g = softmax.clone()
        onehot = torch.zeros_like(g).scatter_(-1, safe.unsqueeze(-1), 1.0) * valid.unsqueeze(-1)
        g = g - onehot * (1.0 - ctx.smoothing) - ctx.smoothing / ctx.vocab
        return (g * grad.unsqueeze(-1)).to(ctx.in_dtype), None, None


def ref_cross_entropy(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    return _UpstreamCE.apply(logits, target, label_smoothing)


# ---------------------------------------------------------------------------------- comparison
def _rel(a: torch.Tensor, r: torch.Tensor) -> float:
    diff = (a.double() - r.double()).norm().item()
    return diff / max(r.double().norm().item(), 1e-30)


def _maxabs(a: torch.Tensor, r: torch.Tensor) -> float:
    return (a.double() - r.double()).abs().max().item() if a.numel() else 0.0


def compare(names: list[str], ours: list[torch.Tensor], same: list[torch.Tensor], ref: list[torch.Tensor], dtype):
    """(problems, errors): the checks described in the module docstring."""
    problems: list[str] = []
    errors: dict[str, list[float]] = {}
    floor = FLOOR[dtype]
    for name, o, t, r in zip(names, ours, same, ref, strict=True):
        if o is None or r is None:
            if (o is None) != (r is None):
                problems.append(f"{name}: {'missing' if o is None else 'unexpected'} gradient")
            continue
        if tuple(o.shape) != tuple(r.shape):
            problems.append(f"{name}: shape {tuple(o.shape)} != {tuple(r.shape)}")
            continue
        if not torch.isfinite(o.double()).all():
            problems.append(f"{name}: non-finite values")
            continue
        e_o, e_t = _rel(o, r), _rel(t, r)
        m_o, m_t = _maxabs(o, r), _maxabs(t, r)
        errors[name] = [e_o, e_t, m_o, m_t]
        scale = r.double().abs().max().item() if r.numel() else 0.0
        if e_o > max(2.0 * e_t, floor):
            problems.append(f"{name}: relative error {e_o:.3g} > max(2 x torch's {e_t:.3g}, {floor:g})")
        if m_o > 4.0 * m_t + floor * scale:
            problems.append(f"{name}: max abs error {m_o:.3g} > 4 x torch's {m_t:.3g} + {floor:g} x {scale:.3g}")
    return problems, errors


def _run(fn: Callable, inputs: list[torch.Tensor | None], grad_out: torch.Tensor, *args: object):
    """Output and input gradients of ``fn(*inputs, *args)`` for output gradient ``grad_out``."""
    out = fn(*inputs, *args)
    out.backward(grad_out.to(out.dtype))
    return [out.detach(), *[None if x is None or x.grad is None else x.grad.detach() for x in inputs]]


def _three(
    fn_ours: Callable, fn_ref: Callable, inputs: list, layout: str, args: tuple, const: frozenset[int] = frozenset()
):
    """Run ours, torch-same-dtype and float64 on copies of ``inputs`` with one shared output gradient.

    Inputs at the positions in ``const`` are constants (no gradient asked for); float
    constants go to the float64 reference in float64.
    """

    def prepare(dtype: torch.dtype | None) -> list:
        out = []
        for i, x in enumerate(inputs):
            if i in const and x is not None:
                out.append(x.double() if dtype is not None and x.is_floating_point() else x)
            else:
                out.append(_leaf(x, dtype))
        return out

    probe = fn_ref(*[None if x is None else x.detach() for x in inputs], *args)
    grad = _grad_like(probe, layout)
    ours = _run(fn_ours, prepare(None), grad, *args)
    same = _run(fn_ref, prepare(None), grad, *args)
    ref = _run(fn_ref, prepare(torch.float64), grad.double(), *args)
    return ours, same, ref


# ---------------------------------------------------------------------------------- the ops
def check(case: Case, device: str) -> dict[str, object]:
    """Run one case; returns {"id", "problems", "errors"}."""
    from fl_patch.impls.flaggems import ops
    from fl_patch.impls.flaggems._runtime import use_backend

    torch.manual_seed(zlib.crc32(case.id.encode()))
    dtype = DTYPES[case.dtype]
    layout = case.layout
    ex = case.extra
    with use_backend(case.op, case.backend):
        if case.op == "rms_norm":
            x = _rand(case.dims, dtype, device, layout)
            w = (1.0 + 0.1 * torch.randn(case.dims[-1], device=device)).to(dtype)
            names = ["y", "dx", "dw"]
            res = _three(ops.rms_norm, ref_rms_norm, [x, w], layout, (1e-5,))
        elif case.op == "layer_norm":
            x = _rand(case.dims, dtype, device, layout)
            w = (1.0 + 0.1 * torch.randn(case.dims[-1], device=device)).to(dtype)
            b = None if ex.get("bias") is False else (0.1 * torch.randn(case.dims[-1], device=device)).to(dtype)
            names = ["y", "dx", "dw", "db"]
            res = _three(ops.layer_norm, ref_layer_norm, [x, w, b], layout, (1e-5,))
        elif case.op == "swiglu":
            y = _rand(case.dims, dtype, device, layout)
            bias = (0.1 * torch.randn(case.dims[-1], device=device)).to(dtype) if ex.get("bias") else None
            names = ["out", "dy", "dbias"]
            res = _three(ops.swiglu, ref_swiglu, [y, bias], layout, ())
        elif case.op == "rope":
            s, b, h, d = case.dims
            rot = int(ex.get("rot", d))
            if layout == "qkv_slice":  # the query of a fused projection [s, b, h, 3d]
                t = torch.randn(s, b, h, 3 * d, device=device).to(dtype)[..., :d]
            else:
                t = _rand((s, b, h, d), dtype, device, layout)
            inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, device=device, dtype=torch.float32) / rot))
            pos = torch.arange(s, device=device, dtype=torch.float32)
            if ex.get("one_position"):  # freqs [1, 1, 1, rot]: the same angles broadcast to every position
                pos = torch.full((1,), 7.0, device=device)
            angles = torch.outer(pos, inv)
            freqs = torch.cat((angles, angles), dim=-1)[:, None, None, :]
            if ex.get("interleaved"):
                freqs = angles.repeat_interleave(2, dim=-1)[:, None, None, :]
            mscale = float(ex.get("mscale", 1.0))
            interleaved = bool(ex.get("interleaved", False))
            names = ["out", "dt", "dfreqs (none)"]
            res = _three(
                lambda t_, f_, m_, i_: ops.rotary(t_, f_, m_, i_),
                ref_rope,
                [t, freqs],
                "transposed" if layout != "contiguous" else layout,
                (mscale, interleaved),
                const=frozenset({1}),
            )
        elif case.op == "qkv_rope":
            s, b, ng, g, hn = case.dims
            rot = int(ex.get("rot", hn))
            mixed = _rand((s, b, ng, (g + 2) * hn), dtype, device, layout)
            inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, device=device, dtype=torch.float32) / rot))
            interleaved = bool(ex.get("interleaved", False))

            def angles(offset: float) -> torch.Tensor:  # query and key at different positions: not mixed up
                positions = torch.arange(s, device=device, dtype=torch.float32) + offset
                if ex.get("distinct_angles"):  # both channels of a pair at their own angle (upstream allows it)
                    every = 1.0 / (10000 ** (torch.arange(rot, device=device, dtype=torch.float32) / rot))
                    return torch.outer(positions, every)[:, None, None, :]
                a = torch.outer(positions, inv)
                a = a.repeat_interleave(2, dim=-1) if interleaved else torch.cat((a, a), dim=-1)
                return a[:, None, None, :]

            q_freqs = angles(0.0)
            # one tensor for both, as megatron passes it (the kernel computes the angles once), or two
            k_freqs = q_freqs if ex.get("same_angles") else angles(5.0)
            names = ["qkv", "dmixed", "dq_freqs (none)", "dk_freqs (none)"]

            def ours_qkv(m_, qf_, kf_, g_, hn_, i_):
                q_, k_, v_ = ops.fused_qkv_rotary(m_, qf_, kf_, g_, hn_, i_)
                return torch.cat([q_.flatten(), k_.flatten(), v_.flatten()])

            res = _three(ours_qkv, ref_qkv_rope, [mixed, q_freqs, k_freqs], "flat", (g, hn, interleaved),
                         const=frozenset({1, 2}))  # fmt: skip
        elif case.op == "attention":
            sq, sk, b, hq, hkv, d = case.dims
            causal = bool(ex.get("causal", True))
            if layout == "qkv_slice":  # megatron's fused QKV: [s, b, hkv, (group + 2) * d] split
                group = hq // hkv
                mixed = torch.randn(sq, b, hkv, (group + 2) * d, device=device).to(dtype)
                q = mixed[..., : group * d].reshape(sq, b, hq, d)
                k = mixed[..., group * d : (group + 1) * d]
                v = mixed[..., (group + 1) * d :]
            else:
                q = _rand((sq, b, hq, d), dtype, device, layout)
                k = _rand((sk, b, hkv, d), dtype, device, layout)
                v = _rand((sk, b, hkv, d), dtype, device, layout)
            scale = 1.0 / math.sqrt(d)
            names = ["out", "dq", "dk", "dv"]
            from fl_patch.impls.flaggems import sdpa

            took = sdpa.CALLS["cudnn"]
            res = _three(
                ops.flash_attention, ref_attention, [q, k, v], "transposed" if layout != "contiguous" else layout,
                (causal, scale),
            )  # fmt: skip
            if case.backend == "cudnn" and sdpa.CALLS["cudnn"] == took:
                res[0][0] = None  # reported below: the backend asked for did not run
        elif case.op == "softmax":
            from fl_patch.impls.flaggems.kernels.softmax import scaled_masked_softmax

            b, h, sq, sk = case.dims
            kind = ex.get("mask", "none")
            x = _rand((b, h, sq, sk), dtype, device, layout)
            mask = (torch.rand(b, 1, sq, sk, device=device) > 0.7) if kind == "tensor" else None
            causal = kind == "causal"
            scale = float(ex.get("scale", 1.0))
            names = ["probs", "dx", "dmask (none)"]
            res = _three(
                lambda x_, m_, c_, s_, o_: scaled_masked_softmax(x_, m_, c_, s_, o_),
                ref_softmax,
                [x, mask],
                layout,
                (causal, scale, dtype),
                const=frozenset({1}),
            )
        elif case.op == "cross_entropy":
            *lead, vocab = case.dims
            x = _rand(tuple(case.dims), dtype, device, layout)
            x.mul_(3.0)  # logits of a few units, like a trained model's
            target = torch.randint(0, vocab, tuple(lead), device=device)
            if ex.get("bad_target"):
                target.view(-1)[0] = vocab + 5
            smoothing = float(ex.get("smoothing", 0.0))
            names = ["loss", "dlogits", "dtarget (none)"]
            res = _three(
                lambda x_, t_, s_: ops.cross_entropy(x_, t_, s_),
                ref_cross_entropy,
                [x, target],
                layout,
                (smoothing,),
                const=frozenset({1}),
            )
        elif case.op.startswith("moe_"):
            from fl_patch.impls.te import moe_fusions

            tokens, experts, topk, hidden = case.dims
            scores = torch.rand(tokens, experts, device=device)
            mask = torch.zeros(tokens, experts, dtype=torch.bool, device=device)
            mask.scatter_(1, scores.topk(topk, dim=1).indices, True)
            if ex.get("drop"):  # capacity drops: tokens with fewer rows than topk, some with none
                mask &= torch.rand(tokens, experts, device=device) >= float(ex["drop"])
            count = int(mask.sum())
            num_rows = count + int(ex.get("spare_rows", 0)) - int(ex.get("truncate", 0))
            row_map = moe_fusions.make_row_id_map(mask, num_rows)
            probs = torch.rand(tokens, experts, device=device) * mask if ex.get("probs") else None
            if case.op == "moe_row_map":  # integers: the kernels' map is the torch form's, entry for entry
                ours_map = ops.moe_row_id_map(mask, num_rows)
                same = ours_map.shape == row_map.shape and torch.equal(ours_map, row_map)
                return {"id": case.id, "problems": [] if same else ["row map differs from the torch form's"],
                        "errors": {}}  # fmt: skip
            if case.op == "moe_permute":
                x = _rand((tokens, hidden), dtype, device, layout)
                names = ["rows+probs", "dx", "dmap (none)", "dprobs"]

                def permute(fn: Callable) -> Callable:
                    def run(x_, m_, p_, n_):
                        out, pp = fn(x_, m_, n_, p_)
                        return out.float().flatten() if pp is None else torch.cat([out.float().flatten(), pp.float()])

                    return run

                res = _three(permute(ops.moe_permute_rows), permute(moe_fusions.permute_rows), [x, row_map, probs],
                             "flat", (num_rows,), const=frozenset({1}))  # fmt: skip
            elif case.op == "moe_unpermute":
                rows_in = _rand((num_rows, hidden), dtype, device, layout)
                weights = torch.rand(tokens, experts, device=device) * mask if ex.get("weights") else None
                names = ["tokens", "drows", "dmap (none)", "dweights"]
                res = _three(
                    ops.moe_unpermute_rows, moe_fusions.unpermute_rows, [rows_in, row_map, weights], layout, (),
                    const=frozenset({1}),
                )  # fmt: skip
            else:  # moe_sort_chunks: ``experts`` chunks of random sizes summing to ``tokens`` rows, shuffled
                cuts = torch.sort(torch.randint(0, tokens + 1, (experts - 1,), device=device)).values
                edges = torch.cat([torch.zeros(1, device=device, dtype=torch.long), cuts,
                                   torch.full((1,), tokens, device=device, dtype=torch.long)])  # fmt: skip
                sizes = edges[1:] - edges[:-1]
                order = torch.randperm(experts, device=device)
                x = _rand((tokens, hidden), dtype, device, layout)
                row_probs = torch.rand(tokens, device=device) if ex.get("probs") else None
                names = ["rows+probs", "dx", "dsizes (none)", "dorder (none)", "dprobs"]

                def sort(fn: Callable) -> Callable:
                    def run(x_, s_, o_, p_):
                        out, pp = fn(x_, s_, o_, p_)
                        return out.float().flatten() if pp is None else torch.cat([out.float().flatten(), pp.float()])

                    return run

                res = _three(sort(ops.moe_sort_chunks), sort(moe_fusions.sort_chunks), [x, sizes, order, row_probs],
                             "flat", (), const=frozenset({1, 2}))  # fmt: skip
        else:
            raise ValueError(case.op)
    ours, same, ref = res
    if ours[0] is None:
        return {"id": case.id, "problems": ["cuDNN attention did not run (the Triton kernel did)"], "errors": {}}
    problems, errors = compare(names, list(ours), list(same), list(ref), dtype)
    return {"id": case.id, "problems": problems, "errors": errors}


# ---------------------------------------------------------------------------------- case lists
def _matrix(op: str, dims3: tuple[int, ...], dims2: tuple[int, ...], **extra: object) -> list[Case]:
    cases = []
    for dtype in DTYPES:
        for layout, dims in (
            ("contiguous", dims3),
            ("transposed", dims3),
            ("contiguous", dims2),
            ("sliced", dims2),
        ):
            cases.append(Case(op, dtype, layout, dims, dict(extra)))
    return cases


def gpu_cases() -> list[Case]:
    """Odd sizes, fp32 and bf16, contiguous and strided, 2-D and 3-D (4-D ops: varied batch/heads)."""
    cases: list[Case] = []
    cases += _matrix("rms_norm", (37, 3, 1000), (301, 4096))
    cases += [Case("rms_norm", "bf16", "strided_last", (5, 7, 130))]
    cases += _matrix("layer_norm", (37, 3, 1000), (301, 4096))
    cases += _matrix("swiglu", (37, 3, 2 * 700), (301, 2 * 2816))
    cases += [Case("swiglu", d, "transposed", (37, 3, 2 * 700), {"bias": True}) for d in DTYPES]
    for dtype in DTYPES:
        cases += [
            Case("rope", dtype, "contiguous", (37, 3, 5, 128)),
            Case("rope", dtype, "qkv_slice", (37, 3, 5, 128), {"rot": 64}),
            Case("rope", dtype, "transposed", (129, 1, 16, 64), {"interleaved": True}),
            Case("rope", dtype, "transposed", (129, 2, 4, 96), {"rot": 32, "mscale": 1.3}),
            Case("rope", dtype, "contiguous", (37, 3, 5, 128), {"one_position": True}),
            Case("rope", dtype, "qkv_slice", (5, 70, 8, 64)),  # 560 (batch, head) rows: 18 programs a position
            Case("qkv_rope", dtype, "sliced", (37, 3, 4, 4, 128)),
            Case("qkv_rope", dtype, "contiguous", (129, 2, 2, 3, 96), {"rot": 64, "interleaved": True}),
            Case("qkv_rope", dtype, "transposed", (7, 40, 8, 2, 64)),  # 40 x 8 x 4 rows: 40 programs a position
            Case("qkv_rope", dtype, "contiguous", (33, 3, 2, 2, 80), {"rot": 48, "distinct_angles": True}),
            Case("qkv_rope", dtype, "sliced", (65, 2, 4, 4, 128), {"same_angles": True}),
        ]
        cases += [Case("layer_norm", dtype, "transposed", (37, 3, 1000), {"bias": False})]
        cases += [
            Case("attention", dtype, "contiguous", (130, 130, 2, 4, 2, 64), {"causal": True}),
            Case("attention", dtype, "qkv_slice", (257, 257, 1, 8, 2, 128), {"causal": True}),
            Case("attention", dtype, "transposed", (37, 91, 3, 2, 1, 128), {"causal": False}),
            Case("attention", dtype, "contiguous", (100, 100, 1, 2, 2, 80), {"causal": True}),
        ]
        cases += [  # the same through cuDNN (half only: fp32 calls take the Triton kernel)
            Case("attention", dtype, layout, dims, extra, backend="cudnn")
            for layout, dims, extra in (
                ("qkv_slice", (257, 257, 1, 8, 2, 128), {"causal": True}),
                ("contiguous", (130, 130, 2, 4, 4, 64), {"causal": True}),
                ("transposed", (37, 91, 3, 2, 1, 128), {"causal": False}),
                ("contiguous", (100, 100, 1, 2, 2, 80), {"causal": True}),
            )
            if dtype == "bf16"
        ]
        cases += [
            Case("softmax", dtype, "contiguous", (2, 3, 37, 37), {"mask": "causal", "scale": 0.5}),
            Case("softmax", dtype, "transposed", (3, 2, 37, 300), {"mask": "tensor"}),
            Case("softmax", dtype, "contiguous", (1, 4, 64, 2048), {"mask": "none"}),
        ]
        cases += [
            Case("cross_entropy", dtype, "contiguous", (37, 3, 32000)),
            Case("cross_entropy", dtype, "transposed", (37, 3, 5001), {"smoothing": 0.1}),
            Case("cross_entropy", dtype, "contiguous", (301, 1000), {"bad_target": True}),
            Case("cross_entropy", dtype, "sliced", (301, 1000)),
        ]
    cases += _moe_cases(small=False)
    return cases


def _moe_cases(small: bool) -> list[Case]:
    """MoE permutation: top-k routing with and without probabilities, dropped tokens, rows no token fills, fewer rows
    than routed, odd widths; the row map entry for entry; chunk regrouping with empty chunks."""
    dims = [(13, 4, 2, 37), (9, 8, 3, 64)] if small else [(4096, 8, 2, 2048), (1000, 64, 6, 1409), (37, 16, 4, 5001)]
    cases = []
    for dtype in DTYPES:
        cases += [
            Case("moe_permute", dtype, "contiguous", dims[0], {"probs": True}),
            Case("moe_permute", dtype, "sliced", dims[1], {"drop": 0.3}),
            Case("moe_permute", dtype, "transposed", dims[-1], {"probs": True, "spare_rows": 3}),
            Case("moe_unpermute", dtype, "contiguous", dims[0], {"weights": True}),
            Case("moe_unpermute", dtype, "sliced", dims[1], {"drop": 0.3}),
            Case("moe_sort_chunks", dtype, "contiguous", dims[0], {"probs": True}),
            Case("moe_sort_chunks", dtype, "sliced", dims[-1]),
        ]
    cases += [
        Case("moe_row_map", "fp32", "contiguous", dims[1], {"drop": 0.3}),
        Case("moe_row_map", "fp32", "contiguous", dims[-1], {"truncate": 5}),
    ]
    return cases


def flaggems_cases() -> list[Case]:
    """The same kinds of case, served by the FlagGems backends (those FlagGems has and the pack offers)."""
    cases: list[Case] = []
    for base in gpu_cases():
        if base.op in ("rms_norm", "layer_norm", "swiglu"):
            cases.append(Case(base.op, base.dtype, base.layout, base.dims, base.extra, backend="flaggems"))
    return cases


def interpret_cases() -> list[Case]:
    """Small cases for Triton's CPU interpreter (slow): every op, both dtypes, strided and 2-D/3-D."""
    cases: list[Case] = []
    for dtype in DTYPES:
        cases += [
            Case("rms_norm", dtype, "transposed", (7, 3, 37)),
            Case("rms_norm", dtype, "sliced", (9, 64)),
            Case("layer_norm", dtype, "transposed", (7, 3, 37)),
            Case("layer_norm", dtype, "strided_last", (9, 64)),
            Case("swiglu", dtype, "transposed", (7, 3, 2 * 37), {"bias": True}),
            Case("swiglu", dtype, "sliced", (9, 2 * 64)),
            Case("rope", dtype, "qkv_slice", (9, 2, 3, 32), {"rot": 16}),
            Case("rope", dtype, "transposed", (9, 2, 3, 32), {"interleaved": True, "mscale": 1.2}),
            Case("attention", dtype, "qkv_slice", (37, 37, 2, 4, 2, 16), {"causal": True}),
            Case("attention", dtype, "transposed", (21, 50, 1, 2, 1, 24), {"causal": False}),
            Case("softmax", dtype, "contiguous", (2, 2, 9, 9), {"mask": "causal", "scale": 0.5}),
            Case("softmax", dtype, "transposed", (2, 2, 9, 13), {"mask": "tensor"}),
            Case("cross_entropy", dtype, "transposed", (5, 3, 1000), {"smoothing": 0.1}),
            Case("cross_entropy", dtype, "contiguous", (9, 301), {"bad_target": True}),
        ]
    cases += _moe_cases(small=True)
    cases += [
        Case("qkv_rope", "bf16", "sliced", (5, 2, 3, 2, 16)),
        Case("qkv_rope", "fp32", "transposed", (4, 3, 2, 3, 24), {"rot": 16, "interleaved": True}),
        Case("qkv_rope", "fp32", "contiguous", (3, 2, 2, 1, 20), {"rot": 12, "distinct_angles": True}),
        Case("qkv_rope", "bf16", "transposed", (4, 2, 2, 2, 16), {"same_angles": True, "distinct_angles": True}),
        Case("qkv_rope", "fp32", "sliced", (3, 2, 1, 2, 16), {"interleaved": True, "distinct_angles": True}),
        Case("layer_norm", "fp32", "transposed", (5, 3, 37), {"bias": False}),
        Case("rope", "fp32", "contiguous", (5, 2, 3, 32), {"one_position": True}),
        # 40 x 13 = 520 (batch, head) rows of 16 rotated channels: five programs a position (128 rows a tile).
        Case("rope", "bf16", "qkv_slice", (3, 40, 13, 16)),
    ]
    return cases


def main(argv: list[str]) -> int:
    """``python gems_checks.py [interpret|gpu]``: run the case list, one JSON line a case; exit 1 on a failure.
    ``interpret BLOCKS`` (JSON): the attention cases alone, with those interpreted block shapes."""
    which = argv[1] if len(argv) > 1 else "interpret"
    device = "cpu" if which == "interpret" else "cuda"
    cases = interpret_cases() if which == "interpret" else gpu_cases()
    from fl_patch.impls.flaggems.kernels import attention

    shipped = dict(attention._INTERPRETED)
    if which == "interpret" and len(argv) > 2:  # the attention kernels with another block-shape relation
        attention._INTERPRETED.update(json.loads(argv[2]))
        cases = [c for c in cases if c.op == "attention"]
    failed = 0
    try:
        for case in cases:
            result = check(case, device)
            failed += bool(result["problems"])
            print(json.dumps(result), flush=True)
    finally:  # the shipped blocks again, for what runs next in this process (tests/support/flaggems/gems_parts.py)
        attention._INTERPRETED.update(shipped)
    print(json.dumps({"cases": len(cases), "failed": failed}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
