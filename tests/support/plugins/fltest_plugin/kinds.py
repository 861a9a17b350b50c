"""Impls of the kinds megatron-core 0.19.2 makes hard (tests/core/test_kinds.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from megatron.core.transformer.transformer_config import TransformerConfig

CALLS: list[str] = []
YARN_FORWARD = "megatron.core.models.common.embeddings.yarn_rotary_pos_embedding.YarnRotaryEmbedding.forward"


@dataclass
class VendorTransformerConfig(TransformerConfig):
    """A vendor's own TransformerConfig, as FlagScale's Ascend tree registers one."""

    vendor_flag: bool = True


def yarn_forward(self, max_seq_len, offset=0, packed_seq=False, cp_group=None):
    """A plain function for YarnRotaryEmbedding.forward (upstream: an lru_cache'd method that
    builds its positions on the current CUDA device): positions on the CPU, mscale 1."""
    CALLS.append("yarn_forward")
    positions = torch.arange(offset, offset + max_seq_len, dtype=torch.float32)
    freqs = torch.outer(positions, self.inv_freq_extra.to("cpu"))
    return torch.cat((freqs, freqs), dim=-1)[:, None, None, :], 1.0
