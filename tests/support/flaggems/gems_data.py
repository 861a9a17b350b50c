"""The synthetic token streams ``gems_gpt.py`` trains on (no fl_patch, no megatron: importable anywhere).

- ``markov_batches``: a fixed sparse Markov chain over uniformly drawn tokens (the curve tests' data);
- ``zipf_batches``: the same kind of chain over Zipf-distributed tokens, as words in text (``--data zipf``);
- ``random_batches``: one random batch, repeated (throughput runs).
"""

from __future__ import annotations

import torch

__all__ = ["markov_batches", "random_batches", "zipf_batches"]


def markov_batches(vocab: int, batch: int, seq: int, seed: int, device: str, steps: int):
    """``steps`` batches from a fixed sparse Markov chain (4 likely successors a token, 5% noise).

    All sequences are generated up front, one vectorized step per position, so data
    generation costs the same few hundred launches whatever the number of steps.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 4), generator=gen).to(device)
    weights = torch.tensor([0.55, 0.25, 0.12, 0.08], device=device)
    step_gen = torch.Generator(device=device).manual_seed(seed + 1)
    n = batch * steps
    tokens = torch.empty(n, seq + 1, dtype=torch.long, device=device)
    tokens[:, 0] = torch.randint(0, vocab, (n,), device=device, generator=step_gen)
    choice = torch.multinomial(weights.expand(n, 4), seq, replacement=True, generator=step_gen)
    noise = torch.rand(n, seq, device=device, generator=step_gen) < 0.05
    random_tokens = torch.randint(0, vocab, (n, seq), device=device, generator=step_gen)
    for i in range(seq):
        nxt = successors[tokens[:, i], choice[:, i]]
        tokens[:, i + 1] = torch.where(noise[:, i], random_tokens[:, i], nxt)
    yield from tokens.view(steps, batch, seq + 1)


def zipf_batches(vocab: int, batch: int, seq: int, seed: int, device: str, steps: int):
    """``steps`` batches from a fixed Markov chain whose tokens are Zipf-distributed, like words in text.

    Each token has 4 likely successors (weights as ``markov_batches``), drawn, like the first token and
    the 5% noise tokens, with probability proportional to 1 / rank (Zipf's law, exponent 1). Frequent
    tokens and their successors are learned first, so the loss falls from the first steps, as on text,
    instead of sitting near ln(vocab) until the model has found a uniform chain's 4 x vocab pairs
    (``markov_batches``' plateau, where the step a run leaves it moves by tens of steps with any change
    of rounding and hides a small gap between two runs).
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    order = torch.randperm(vocab, generator=gen)  # which token holds which rank
    probs = torch.empty(vocab, dtype=torch.float64)
    probs[order] = zipf / zipf.sum()
    successors = torch.multinomial(probs.float(), vocab * 4, replacement=True, generator=gen).view(vocab, 4).to(device)
    weights = torch.tensor([0.55, 0.25, 0.12, 0.08], device=device)
    step_gen = torch.Generator(device=device).manual_seed(seed + 1)
    unigram = probs.float().to(device)
    n = batch * steps
    tokens = torch.empty(n, seq + 1, dtype=torch.long, device=device)
    tokens[:, 0] = torch.multinomial(unigram, n, replacement=True, generator=step_gen)
    choice = torch.multinomial(weights.expand(n, 4), seq, replacement=True, generator=step_gen)
    noise = torch.rand(n, seq, device=device, generator=step_gen) < 0.05
    random_tokens = torch.multinomial(unigram, n * seq, replacement=True, generator=step_gen).view(n, seq)
    for i in range(seq):
        nxt = successors[tokens[:, i], choice[:, i]]
        tokens[:, i + 1] = torch.where(noise[:, i], random_tokens[:, i], nxt)
    yield from tokens.view(steps, batch, seq + 1)


def random_batches(vocab: int, batch: int, seq: int, device: str):
    # a seeded generator: every tensor-parallel rank draws the same tokens
    gen = torch.Generator(device=device).manual_seed(1234)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=device, generator=gen)
    while True:
        yield tokens
