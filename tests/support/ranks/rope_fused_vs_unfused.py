"""Run under ``python -m fl_patch``: the CPU pack's fused RoPE against megatron's own unfused path.

Generated cases (hypothesis: shapes, partial rotary, interleaved, dtypes, packed ``thd``
sequences with context parallelism 1/2/4) compare
``rope_utils.fused_apply_rotary_pos_emb*`` (the pack's, installed over upstream's None)
with ``rope_utils._apply_rotary_pos_emb_bshd`` / ``_apply_rotary_pos_emb_thd``, forward and
backward; then a GPT model built with ``apply_rope_fusion=True`` gives the unfused model's
loss and gradients. Prints one JSON line.
"""

from __future__ import annotations

import json
import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from megatron.core import parallel_state
from megatron.core.models.common.embeddings import rope_utils
from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

problems: list[str] = []
cases = 0
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


class _CpGroup:
    """The two answers megatron's unfused thd path asks of a context-parallel group (size, rank)."""

    def __init__(self, size: int, rank: int) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def _close(name: str, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> None:
    err = (a.float() - b.float()).abs().max().item() if a.numel() else 0.0
    scale = max(1.0, b.float().abs().max().item() if b.numel() else 0.0)
    if a.shape != b.shape or err > TOL[dtype] * scale:
        problems.append(f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}, max error {err}")


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    s=st.integers(1, 12),
    b=st.integers(1, 3),
    h=st.integers(1, 3),
    half=st.integers(1, 8),
    extra=st.integers(0, 3),
    interleaved=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
)
def check_bshd(s: int, b: int, h: int, half: int, extra: int, interleaved: bool, dtype: torch.dtype) -> None:
    global cases
    cases += 1
    rot = 2 * half
    d = rot + 2 * extra
    freqs = RotaryEmbedding(kv_channels=rot, rotary_percent=1.0, rotary_interleaved=interleaved)(s + 2)
    t = torch.randn(s, b, h, d).to(dtype)
    x1 = t.clone().requires_grad_()
    x2 = t.clone().requires_grad_()
    fused = rope_utils.fused_apply_rotary_pos_emb(x1, freqs, interleaved=interleaved)
    ref = rope_utils._apply_rotary_pos_emb_bshd(x2, freqs[:s], rotary_interleaved=interleaved)
    _close(f"bshd fwd s={s} d={d} rot={rot} il={interleaved} {dtype}", fused, ref, dtype)
    g = torch.randn_like(ref)
    fused.backward(g)
    ref.backward(g)
    _close(f"bshd bwd s={s} d={d} rot={rot} il={interleaved} {dtype}", x1.grad, x2.grad, dtype)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lengths=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    cp=st.sampled_from([1, 2, 4]),
    half=st.integers(1, 6),
    interleaved=st.booleans(),
    data=st.data(),
)
def check_thd(lengths: list[int], cp: int, half: int, interleaved: bool, data: st.DataObject) -> None:
    global cases
    cases += 1
    rank = data.draw(st.integers(0, cp - 1))
    full = [n * 2 * cp if cp > 1 else n for n in lengths]  # every sequence splits into 2 x cp chunks
    cu = torch.tensor([0, *torch.tensor(full).cumsum(0).tolist()], dtype=torch.int32)
    rot = 2 * half
    # Fewer positions than the packed batch (upstream's "traditional" mode, which TE's kernel does).
    freqs = RotaryEmbedding(kv_channels=rot, rotary_percent=1.0, rotary_interleaved=interleaved)(max(full))
    if freqs.shape[0] == int(cu[-1]):
        freqs = RotaryEmbedding(kv_channels=rot, rotary_percent=1.0, rotary_interleaved=interleaved)(max(full) + 1)
    t = torch.randn(sum(full) // cp, 2, rot)
    fused = rope_utils.fused_apply_rotary_pos_emb_thd(t, cu, freqs, cp_size=cp, cp_rank=rank, interleaved=interleaved)
    ref = rope_utils._apply_rotary_pos_emb_thd(
        t, cu, freqs, rotary_interleaved=interleaved, cp_group=_CpGroup(cp, rank)
    )
    _close(f"thd lengths={full} cp={cp}/{rank} rot={rot} il={interleaved}", fused, ref, torch.float32)


def _model_loss(fusion: bool) -> tuple[float, list[torch.Tensor]]:
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(1)
    model_parallel_cuda_manual_seed(1)
    config = TransformerConfig(
        num_layers=2, hidden_size=32, num_attention_heads=4, apply_rope_fusion=fusion, use_cpu_initialization=True
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=64,
        max_sequence_length=16,
        position_embedding_type="rope",
    )
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(3))
    position_ids = torch.arange(16).unsqueeze(0).expand(2, -1)
    mask = torch.ones(2, 1, 16, 16, dtype=torch.bool).tril().logical_not()
    loss = model(tokens, position_ids, mask, labels=tokens).float().mean()
    loss.backward()
    return loss.item(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def main() -> None:
    from megatron.core.transformer.transformer_config import TransformerConfig

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29577")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel()
    built = TransformerConfig(num_layers=1, hidden_size=32, num_attention_heads=4, apply_rope_fusion=True)
    check_bshd()
    check_thd()
    fused_loss, fused_grads = _model_loss(True)
    unfused_loss, unfused_grads = _model_loss(False)
    grads_close = len(fused_grads) == len(unfused_grads) and all(
        torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(fused_grads, unfused_grads, strict=True)
    )
    parallel_state.destroy_model_parallel()
    torch.distributed.destroy_process_group()
    print(
        json.dumps(
            {
                "config_with_fusion_builds": bool(built.apply_rope_fusion),
                "cases": cases,
                "problems": problems[:20],
                "model_loss_fused": fused_loss,
                "model_loss_unfused": unfused_loss,
                "model_grads_close": grads_close,
            }
        )
    )


if __name__ == "__main__":
    main()
