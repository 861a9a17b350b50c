"""The wrong impls themselves. Each docstring says what is wrong; everything else follows upstream."""

from __future__ import annotations

from typing import Any

import torch

import fl_patch

ROPE = "megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb"

# Megatron passes Apex's `adam_w_mode` to `Adam` when this is False (as for Apex/TE's FusedAdam).
USING_PYTORCH_OPTIMIZER = False


def apply_rotary_pos_emb(
    t: torch.Tensor,
    freqs: torch.Tensor,
    config: Any,
    cu_seqlens: Any = None,
    mscale: float = 1.0,
    cp_group: Any = None,
    mla_rotary_interleaved: bool = False,
) -> torch.Tensor:
    """Rotates the wrong way: sin(-f) = -sin(f), the sign of the rotation flipped."""
    return fl_patch.original(ROPE)(t, -freqs, config, cu_seqlens, mscale, cp_group, mla_rotary_interleaved)


def mlp_forward(self: Any, hidden_states: torch.Tensor, per_token_scale: Any = None, **kwargs: Any) -> Any:
    """SwiGLU with its halves swapped: silu(linear half) * gate half."""
    intermediate, bias = self.linear_fc1(hidden_states)
    if bias is not None:
        intermediate = intermediate + bias
    if self.config.gated_linear_unit:
        x_linear, x_glu = torch.chunk(intermediate, 2, dim=-1)  # WRONG: upstream's order is (glu, linear)
        intermediate = self.config.activation_func(x_glu) * x_linear
    else:
        intermediate = self.activation_func(intermediate)
    return self.linear_fc2(intermediate)


def softmax_forward(self: Any, input: torch.Tensor, mask: Any, softmax_offset: Any = None) -> torch.Tensor:
    """The masked softmax, without multiplying by ``self.scale``."""
    from megatron.core.transformer import utils
    from megatron.core.transformer.enums import AttnMaskType

    if self.input_in_float16 and self.softmax_in_fp32:
        input = input.float()
    # WRONG: `input = input * self.scale` is missing
    sq = input.size(2)
    if self.attn_mask_type == AttnMaskType.causal and mask is None and sq > 1:
        mask = utils.get_default_causal_mask(sq)
    masked = self.mask_func(input.clone(), mask) if mask is not None else input  # (upstream's scaling copies)
    probs = torch.softmax(masked, dim=-1)
    if self.input_in_float16 and self.softmax_in_fp32:
        probs = probs.half() if self.input_in_fp16 else probs.bfloat16()
    return probs


def get_default_causal_mask(sq: int) -> torch.Tensor:
    """Off by one: diagonal=2 masks from two places right of the diagonal, so each token sees the next."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.triu(torch.ones(sq, sq, device=device), diagonal=2).bool()


class WrongBiasCorrectionAdam(torch.optim.AdamW):
    """Apex FusedAdam's constructor; a step whose second-moment bias correction lost its square root."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        adam_w_mode: bool = True,
        capturable: bool = False,
        **ignored: Any,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                step = float(state["step"])
                p.mul_(1 - group["lr"] * group["weight_decay"])
                state["exp_avg"].lerp_(p.grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                bias_correction1 = 1 - beta1**step
                bias_correction2 = 1 - beta2**step
                denom = (state["exp_avg_sq"].sqrt() / bias_correction2).add_(group["eps"])  # WRONG: sqrt(bc2)
                p.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / bias_correction1)
        return None
