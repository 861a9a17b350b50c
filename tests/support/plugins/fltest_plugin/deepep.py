"""A vendor's fused_a2a for one rank, as FlagScale's Kunlunxin tree registers one (issue 30).

Upstream ``megatron.core.transformer.moe.fused_a2a`` defines ``fused_dispatch``,
``fused_combine`` and ``set_deepep_num_sms`` only when DeepEP imports (``HAVE_DEEP_EP``);
elsewhere they are ``None``, and ``_DeepepManager`` refuses to start.
"""

from __future__ import annotations

import torch

CALLS: list[str] = []
HAVE_DEEP_EP = True


def fused_dispatch(
    x, token_indices, token_probs, num_experts, group, async_finish=False, allocate_on_comm_stream=False
):
    """One rank: every token stays here; tokens per expert counted from the routing."""
    CALLS.append("fused_dispatch")
    valid = token_indices[token_indices >= 0]
    tokens_per_expert = torch.bincount(valid, minlength=num_experts)
    return x, token_indices, token_probs, tokens_per_expert, ("handle", x.shape)


def fused_combine(x, group, handle, async_finish=False, allocate_on_comm_stream=False):
    CALLS.append("fused_combine")
    assert handle[0] == "handle"
    return x, None


def set_deepep_num_sms(num_sms):
    CALLS.append(f"set_deepep_num_sms({num_sms})")
