"""One process (world size 1, gloo) under fl_patch: TE's fused MoE functions without TE against megatron's own.

Generated cases (seeded): megatron's ``permute`` / ``unpermute`` / ``sort_chunks_by_idxs`` with ``fused=True``
(fl_patch's functions) against ``fused=False`` (megatron's torch code), forward and backward, fp32 and bf16,
top-k routing with and without dropped tokens, drop-and-pad capacity maps; the router's fused forms against
the unfused; megatron's indices-to-multihot converter against a loop; and a MoE GPT trained with ``moe_permute_fusion``/``moe_router_fusion`` on and off.

Prints one JSON line; tests/impls/test_te_moe_fusions.py asserts on it. ``PERMUTE_KERNELS=1``: the row movement is
counted (the FlagGems pack's kernels in Triton's interpreter, when the pack is the vendor). ``MOE_FUSION_CASES``: how
many generated cases (120); ``MOE_TRAIN_LAYERS``: the trained GPT's layers, each a MoE layer (2);
``MOE_TRAIN_GEMMS``: the experts' GEMM forms each dispatcher trains with, comma-separated (``sequential,grouped``).
"""

from __future__ import annotations

import json
import os
import sys

import torch
from megatron.core import parallel_state as ps
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.moe import moe_utils
from megatron.core.transformer.transformer_config import TransformerConfig

from fl_patch.impls.te import moe_fusions

CALLS = {"permute_rows": 0, "unpermute_rows": 0}


def _count(name: str) -> None:
    inner = getattr(moe_fusions, name)

    def counted(*args, **kwargs):
        CALLS[name] += 1
        return inner(*args, **kwargs)

    setattr(moe_fusions, name, counted)


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def routing(gen: torch.Generator, tokens: int, experts: int, topk: int, drop: float) -> torch.Tensor:
    scores = torch.rand(tokens, experts, generator=gen)
    top = scores.topk(topk, dim=1).indices
    mask = torch.zeros(tokens, experts, dtype=torch.bool).scatter(1, top, True)
    if drop > 0:  # capacity drops: some (token, expert) pairs removed, so tokens carry 0..topk rows
        mask &= torch.rand(tokens, experts, generator=gen) >= drop
    return mask


def permutation_cases(n_cases: int, dtype: torch.dtype) -> dict[str, float | int]:
    """fused=True vs fused=False on generated routings: largest differences seen."""
    gen = torch.Generator().manual_seed(7 if dtype == torch.float32 else 8)
    worst = {"permute": 0.0, "permuted_probs": 0.0, "permute_grad_x": 0.0, "permute_grad_probs": 0.0}
    worst |= {"unpermute_excess_error": 0.0, "unpermute_grad": 0.0, "unpermute_grad_probs": 0.0}
    worst |= {"truncated": 0.0, "drop_and_pad": 0.0, "cases": 0}
    for _ in range(n_cases):
        tokens = int(torch.randint(1, 40, (1,), generator=gen))
        experts = int(torch.randint(1, 9, (1,), generator=gen))
        topk = int(torch.randint(1, experts + 1, (1,), generator=gen))
        hidden = int(torch.randint(1, 24, (1,), generator=gen))
        drop = [0.0, 0.3][int(torch.randint(0, 2, (1,), generator=gen))]
        mask = routing(gen, tokens, experts, topk, drop)
        count = int(mask.sum())
        x0 = torch.randn(tokens, hidden, generator=gen).to(dtype)
        probs0 = torch.rand(tokens, experts, generator=gen) * mask  # the router's fp32 probabilities
        g_out = torch.randn(count, hidden, generator=gen).to(dtype)
        g_pp = torch.randn(count, generator=gen)
        results = []
        for fused in (True, False):
            x = x0.clone().requires_grad_(True)
            probs = probs0.clone().requires_grad_(True)
            out, pp, mapping = moe_utils.permute(x, mask, probs=probs, num_out_tokens=count, fused=fused)[:3]
            ((out.float() * g_out.float()).sum() + (pp * g_pp).sum()).backward()
            results.append((out.detach(), pp.detach(), x.grad, probs.grad, mapping))
        (fo, fp, fgx, fgp, fmap), (uo, up, ugx, ugp, umap) = results
        worst["permute"] = max(worst["permute"], (fo.float() - uo.float()).abs().max().item() if count else 0.0)
        worst["permuted_probs"] = max(worst["permuted_probs"], (fp - up).abs().max().item() if count else 0.0)
        worst["permute_grad_x"] = max(worst["permute_grad_x"], rel(fgx, ugx) if count else 0.0)
        worst["permute_grad_probs"] = max(worst["permute_grad_probs"], rel(fgp, ugp) if count else 0.0)
        # unpermute with merging probabilities: each against float64 maths; fl_patch's no farther than megatron's
        rows0 = uo.clone()
        g_back = torch.randn(tokens, hidden, generator=gen).to(dtype)
        want = torch.zeros(tokens, hidden, dtype=torch.float64)
        src = umap  # megatron's sorted indices: the token of each row
        pp64 = up.double()
        want.index_add_(0, src, rows0.double() * pp64[:, None])
        outs = []
        for fused, mapping in ((True, fmap), (False, umap)):
            rows = rows0.clone().requires_grad_(True)
            probs = probs0.clone().requires_grad_(True)
            y = moe_utils.unpermute(rows, mapping, restore_shape=x0.shape, probs=probs, routing_map=mask, fused=fused)
            (y.float() * g_back.float()).sum().backward()
            outs.append((y.detach(), rows.grad, probs.grad))
        if count:
            excess = rel(outs[0][0], want) - rel(outs[1][0], want)
            worst["unpermute_excess_error"] = max(worst["unpermute_excess_error"], excess)
            worst["unpermute_grad"] = max(worst["unpermute_grad"], rel(outs[0][1], outs[1][1]))
            worst["unpermute_grad_probs"] = max(worst["unpermute_grad_probs"], rel(outs[0][2], outs[1][2]))
        # fewer rows than routed (num_out_tokens below the count): both keep the first rows, expert by expert
        if count > 1:
            keep = int(torch.randint(1, count, (1,), generator=gen))
            f = moe_utils.permute(x0, mask, num_out_tokens=keep, fused=True)[0]
            u = moe_utils.permute(x0, mask, num_out_tokens=keep, fused=False)[0]
            worst["truncated"] = max(worst["truncated"], (f.float() - u.float()).abs().max().item())
        # drop-and-pad: exactly `capacity` tokens per expert (megatron's capacity map)
        capacity = int(torch.randint(1, tokens + 1, (1,), generator=gen))
        order = torch.rand(experts, tokens, generator=gen).argsort(dim=1)[:, :capacity]
        padded = torch.zeros(experts, tokens, dtype=torch.bool).scatter(1, order, True).t().contiguous()
        n = experts * capacity
        f = moe_utils.permute(x0, padded, num_out_tokens=n, fused=True)[0]
        u = moe_utils.permute(x0, padded, num_out_tokens=n, fused=False, drop_and_pad=True)[0]
        worst["drop_and_pad"] = max(worst["drop_and_pad"], (f.float() - u.float()).abs().max().item())
        worst["cases"] += 1
    return worst


def sort_chunk_cases(n_cases: int) -> dict[str, float | int]:
    gen = torch.Generator().manual_seed(9)
    worst = {"sort_chunks": 0.0, "sort_chunks_probs": 0.0, "sort_chunks_grad": 0.0, "cases": 0}
    for _ in range(n_cases):
        chunks = int(torch.randint(1, 9, (1,), generator=gen))
        sizes = torch.randint(0, 6, (chunks,), generator=gen)
        order = torch.randperm(chunks, generator=gen)
        rows = int(sizes.sum())
        x0 = torch.randn(rows, 5, generator=gen)
        p0 = torch.rand(rows, generator=gen)
        g = torch.randn(rows, 5, generator=gen)
        got = []
        for fused in (True, False):
            x = x0.clone().requires_grad_(True)
            out, probs = moe_utils.sort_chunks_by_idxs(x, sizes, order, probs=p0, fused=fused)
            (out * g).sum().backward()
            got.append((out.detach(), probs, x.grad))
        worst["sort_chunks"] = max(worst["sort_chunks"], (got[0][0] - got[1][0]).abs().max().item() if rows else 0.0)
        worst["sort_chunks_probs"] = max(
            worst["sort_chunks_probs"], (got[0][1] - got[1][1]).abs().max().item() if rows else 0.0
        )
        worst["sort_chunks_grad"] = max(
            worst["sort_chunks_grad"], (got[0][2] - got[1][2]).abs().max().item() if rows else 0.0
        )
        worst["cases"] += 1
    return worst


def router_cases() -> dict[str, bool]:
    gen = torch.Generator().manual_seed(10)
    logits = torch.randn(37, 8, generator=gen)
    bias = torch.randn(8, generator=gen) * 0.1
    same = {}
    settings = {
        "softmax": dict(score_function="softmax"),
        "softmax_pre": dict(score_function="softmax", use_pre_softmax=True),
        "sigmoid_bias_scaled": dict(score_function="sigmoid", expert_bias=bias, scaling_factor=2.5),
        "grouped": dict(score_function="softmax", num_groups=4, group_topk=2),
    }
    for name, kw in settings.items():
        f = moe_utils.topk_routing_with_score_function(logits, 2, fused=True, **kw)
        u = moe_utils.topk_routing_with_score_function(logits, 2, fused=False, **kw)
        same[f"topk_{name}"] = all(torch.equal(a, b) for a, b in zip(f, u, strict=True))
    for score in ("softmax", "sigmoid"):
        f = moe_utils.compute_routing_scores_for_aux_loss(logits, 2, score, fused=True)
        u = moe_utils.compute_routing_scores_for_aux_loss(logits, 2, score, fused=False)
        same[f"aux_scores_{score}"] = all(torch.equal(a, b) for a, b in zip(f, u, strict=True))
    probs = torch.softmax(logits, -1)
    per_expert = torch.randint(0, 10, (8,), generator=gen).float()
    f = moe_utils.switch_load_balancing_loss_func(probs, per_expert, 37, 2, 8, 1e-2, fused=True)
    u = moe_utils.switch_load_balancing_loss_func(probs, per_expert, 37, 2, 8, 1e-2, fused=False)
    same["aux_loss"] = torch.equal(f, u)
    return same


def multihot_cases(n_cases: int) -> dict[str, float | int | bool]:
    """megatron's ``fused_indices_to_multihot`` (fl_patch's torch form on this machine) against a per-entry loop:
    random tokens, top-k and expert counts, unused slots (-1) and indices of another rank's experts (out of
    range), fp32 and bf16 probabilities; the backward against the loop's gather."""
    from megatron.core.fusions import fused_indices_converter
    from megatron.core.transformer.moe import token_dispatcher

    gen = torch.Generator().manual_seed(7)
    worst = {"multihot": 0, "probs": 0.0, "grad": 0.0}
    for case in range(n_cases):
        tokens = int(torch.randint(1, 300, (1,), generator=gen))
        topk = int(torch.randint(1, 9, (1,), generator=gen))
        experts = int(torch.randint(topk, 40, (1,), generator=gen))
        dtype = torch.bfloat16 if case % 2 else torch.float32
        # distinct experts per row (a top-k never repeats one), some slots unused, some beyond this rank's experts
        indices = torch.stack([torch.randperm(experts + 4, generator=gen)[:topk] for _ in range(tokens)]).int()
        indices[torch.rand(tokens, topk, generator=gen) < 0.3] = -1
        probs = torch.rand(tokens, topk, generator=gen).to(dtype).requires_grad_(True)
        multihot, in_multihot = fused_indices_converter.fused_indices_to_multihot(indices, probs, experts)
        want_hot = torch.zeros(tokens, experts, dtype=torch.bool)
        want_probs = torch.zeros(tokens, experts, dtype=dtype)
        for t in range(tokens):
            for j in range(topk):
                e = int(indices[t, j])
                if 0 <= e < experts:
                    want_hot[t, e] = True
                    want_probs[t, e] = probs[t, j].detach()
        grad_out = torch.randn(tokens, experts, generator=gen).to(dtype)
        in_multihot.backward(grad_out)
        want_grad = torch.zeros(tokens, topk, dtype=dtype)
        for t in range(tokens):
            for j in range(topk):
                e = int(indices[t, j])
                if 0 <= e < experts:
                    want_grad[t, j] = grad_out[t, e]
        assert multihot.dtype == torch.bool and in_multihot.dtype == dtype and probs.grad is not None
        worst["multihot"] += int((multihot != want_hot).sum())
        worst["probs"] = max(worst["probs"], float((in_multihot.detach() - want_probs).abs().max()))
        worst["grad"] = max(worst["grad"], float((probs.grad - want_grad).abs().max()))
    return {
        "cases": n_cases,
        **worst,
        "dispatcher_bound": token_dispatcher.fused_indices_to_multihot
        is fused_indices_converter.fused_indices_to_multihot,
        # (what fl_patch installs runs the impl's code under megatron's name: core/patch.py)
        "patched": fused_indices_converter.fused_indices_to_multihot.__code__.co_filename.endswith(
            "fl_patch/impls/cpu/fusions.py"
        ),
    }


def train_moe(dispatcher: str, grouped: bool, fusion: bool, steps: int = 3, layers: int = 2) -> list[float]:
    torch.manual_seed(3)
    model_parallel_cuda_manual_seed(3)
    config = TransformerConfig(
        num_layers=layers, hidden_size=32, num_attention_heads=4, use_cpu_initialization=True, normalization="RMSNorm",
        hidden_dropout=0.0, attention_dropout=0.0, num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=48,
        moe_token_dispatcher_type=dispatcher, moe_grouped_gemm=grouped, moe_aux_loss_coeff=1e-2,
        moe_router_load_balancing_type="aux_loss", moe_permute_fusion=fusion, moe_router_fusion=fusion,
    )  # fmt: skip
    spec = get_gpt_layer_with_transformer_engine_spec(num_experts=4, moe_grouped_gemm=grouped)
    model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=64, max_sequence_length=16)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 64, (2, 16), generator=gen)
    pos = torch.arange(16).expand(2, 16)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(tokens, pos, None, labels=torch.roll(tokens, -1, 1)).float().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", sys.argv[1] if len(sys.argv) > 1 else "29534")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    ps.initialize_model_parallel()
    n_cases = int(os.environ.get("MOE_FUSION_CASES", "120"))
    layers = int(os.environ.get("MOE_TRAIN_LAYERS", "2"))
    gemms = os.environ.get("MOE_TRAIN_GEMMS", "sequential,grouped").split(",")
    if os.environ.get("PERMUTE_KERNELS") == "1":
        _count("permute_rows")
        _count("unpermute_rows")
    out: dict[str, object] = {
        "have_te_in_moe_utils": moe_utils.HAVE_TE,
        "fused_names_bound": {
            name: getattr(moe_utils, name) is getattr(moe_fusions, name)
            for name in (
                "fused_permute",
                "fused_unpermute",
                "fused_sort_chunks_by_index",
                "fused_topk_with_score_function",
            )
        },
        "fp32": permutation_cases(n_cases, torch.float32),
        "bf16": permutation_cases(n_cases // 2, torch.bfloat16),
        "sort_chunks": sort_chunk_cases(n_cases),
        "router": router_cases(),
        "multihot": multihot_cases(n_cases // 2),
    }
    trained = {}
    for dispatcher in ("alltoall", "allgather"):
        for gemm in gemms:
            grouped = {"sequential": False, "grouped": True}[gemm]
            on = train_moe(dispatcher, grouped, True, layers=layers)
            off = train_moe(dispatcher, grouped, False, layers=layers)
            trained[f"{dispatcher}_{gemm}"] = {
                "on": on,
                "off": off,
                "max_diff": max(abs(a - b) for a, b in zip(on, off, strict=True)),
            }
    out["trained"] = trained
    out["calls"] = dict(CALLS)
    if os.environ.get("MG_FL_PREFER") == "flaggems":
        from fl_patch.impls.flaggems._runtime import FALLBACKS

        out["fallbacks"] = {f"{op}: {why}": n for (op, why), n in FALLBACKS.items()}
    import fl_patch

    out["disabled"] = sorted({r.target for r in fl_patch.report() if r.status == fl_patch.Status.DISABLED})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
