"""Hybrid Spark's price, per-request chain choice and batch allocation, as tensor code.

Shapes: R requests in the batch, C candidate chains per request (DSpark, copy), L slots.
Survival scores are a_k = P(draft tokens 1..k all accepted); padding slots hold -inf.

1. `price`: with R requests and K admitted draft slots, goodput is
   Theta(K) = (R + S_K) / T(R + K), S_K the sum of the K best survival scores. One more slot
   with survival a pays iff a > lambda = Theta(K*) * (T(R + K* + 1) - T(R + K*)), K* the best K.
2. `choose`: per request, the chain with the larger max_l sum_{j<=l} (a_j - lambda), cut to the
   slots with a_j > lambda; a copy chain that starts with the whole DSpark chain is kept instead.
3. `allocate`: a global top-K over the kept slots' survival (ties: earlier position, then earlier
   request), so each request's admitted slots form a prefix and at most K are verified.

Admission of slot k depends on a_k (made before x_k is known to the target) and never on the
target's own numbers, so verification stays exact (one-hot verification of every chain).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from hsedit.drafting.chain import DSPARK, NGRAM, DraftChain

NEG_INF = float("-inf")


@dataclass(frozen=True)
class Price:
    per_token: float  # lambda: survival a slot needs to be worth verifying
    budget: int  # K*: draft slots the batch should verify


def price(
    step_seconds: torch.Tensor,  # [max_tokens + 1] T(B) for B = 0..max_tokens scheduled tokens
    num_requests: int,
    scores: torch.Tensor,  # [N] survival of candidate slots (any order; -inf = none)
) -> Price:
    if num_requests <= 0:
        return Price(0.0, 0)
    finite = scores[torch.isfinite(scores)]
    ordered = torch.sort(finite, descending=True).values  # [N']
    max_k = min(len(ordered), len(step_seconds) - 2 - num_requests)
    if max_k <= 0:
        return Price(float("inf"), 0)
    gained = torch.cat([ordered.new_zeros(1), torch.cumsum(ordered[:max_k], 0)])  # [max_k + 1] S_K
    k = torch.arange(max_k + 1)
    times = step_seconds[num_requests + k]  # [max_k + 1] T(R + K)
    goodput = (num_requests + gained) / times
    best = int(torch.argmax(goodput))  # first maximum: the smallest K that earns it
    marginal = float(step_seconds[num_requests + best + 1] - step_seconds[num_requests + best])
    return Price(float(goodput[best]) * marginal, best)


def choose(
    survival: torch.Tensor,  # [R, C, L] -inf where a chain has no slot
    lam: float,
    prefer: torch.Tensor | None = None,  # [R] chain index forced by the prefix rule, -1 = none
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per request: (chosen chain [R], kept length [R]); kept length 0 means no draft."""
    gain = torch.where(torch.isfinite(survival), survival - lam, torch.zeros_like(survival))
    worth = (survival > lam).sum(dim=-1)  # [R, C] slots above the price: a prefix (survival decreases)
    utility = torch.cat([torch.zeros_like(gain[..., :1]), torch.cumsum(gain, dim=-1)], dim=-1).amax(dim=-1)
    # Ties go to the lower chain index (callers put the copy chain first: it costs nothing to draft).
    chosen = torch.argmax(utility, dim=-1)  # [R]
    if prefer is not None:
        chosen = torch.where(prefer >= 0, prefer, chosen)
    kept = worth.gather(1, chosen[:, None]).squeeze(1)
    return chosen, kept


def allocate(
    scores: torch.Tensor,  # [R, L] survival of each request's kept chain, -inf past its end
    budget: int,
) -> torch.Tensor:
    """Admitted draft length per request [R]: the `budget` best slots over the whole batch."""
    num_requests = scores.shape[0]
    if budget <= 0 or scores.numel() == 0:
        return torch.zeros(num_requests, dtype=torch.long)
    # Position-major order, then a stable sort: equal scores go to the earlier position, then
    # the earlier request, which keeps every request's admitted slots a prefix.
    flat = scores.t().reshape(-1)  # [L * R]
    order = torch.sort(-flat, stable=True).indices[:budget]
    taken = order[torch.isfinite(flat[order])]
    admitted = torch.zeros(num_requests, dtype=torch.long)
    admitted.scatter_add_(0, taken % num_requests, torch.ones_like(taken))
    return admitted


def convex_step_seconds(tokens: list[int], seconds: list[float], max_tokens: int) -> torch.Tensor:
    """T(B) for B = 0..max_tokens from a few measured (tokens, seconds) points: their lower convex
    envelope, interpolated, the last slope continued. Convex, so the marginal cost of a slot never
    falls as the batch grows, and one noisy sample cannot put a cliff in the price."""
    points = sorted(zip(tokens, seconds))
    hull: list[tuple[float, float]] = []
    for x, y in points:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (y2 - y1) * (x - x1) >= (y - y1) * (x2 - x1):  # the middle point lies on or above
                hull.pop()
            else:
                break
        hull.append((x, y))
    xs = torch.tensor([x for x, _ in hull], dtype=torch.float64)
    ys = torch.tensor([y for _, y in hull], dtype=torch.float64)
    b = torch.arange(max_tokens + 1, dtype=torch.float64)
    if len(hull) == 1:
        return torch.full((max_tokens + 1,), float(ys[0]))
    slopes = torch.clamp((ys[1:] - ys[:-1]) / (xs[1:] - xs[:-1]), min=0.0)
    segment = torch.clamp(torch.searchsorted(xs, b, right=True) - 1, 0, len(slopes) - 1)
    out = ys[segment] + slopes[segment] * (b - xs[segment])
    return torch.maximum(out, ys[0]).float()  # flat below the smallest measured step


def pad(rows: list[list[float]], length: int) -> torch.Tensor:
    """Ragged survival lists -> [len(rows), length] with -inf padding."""
    out = torch.full((len(rows), length), NEG_INF)
    for i, row in enumerate(rows):
        n = min(len(row), length)
        if n:
            out[i, :n] = torch.tensor(row[:n])
    return out


class HybridSelector:
    """Keeps one chain per request each step: the price, the choice, the batch allocation."""

    def __init__(self, max_batch_tokens: int = 8192, device: str | torch.device = "cpu") -> None:
        self.max_batch_tokens = max_batch_tokens
        self.device = torch.device(device)  # where the choice and allocation run
        self.step_seconds: torch.Tensor | None = None  # [max_batch_tokens + 1], once profiled
        self.last_price: Price | None = None
        self._stale_scores: torch.Tensor | None = None  # last step's best candidate survival

    def set_costs(self, tokens: list[int], seconds: list[float]) -> None:
        """Measured step times (the engine's cost table) -> T(B) for every B."""
        self.step_seconds = convex_step_seconds(tokens, seconds, self.max_batch_tokens)

    def select(self, candidates: list[list[DraftChain]]) -> list[DraftChain | None]:
        if not candidates:
            return []
        copy = [_by_source(chains, NGRAM) for chains in candidates]
        neural = [_by_source(chains, DSPARK) for chains in candidates]
        length = max([len(c) for chains in candidates for c in chains] or [1])
        survival = torch.stack(  # [R, 2, L]: the copy chain first, so ties go to it
            [pad([_survival(c) for c in copy], length), pad([_survival(c) for c in neural], length)], dim=1
        ).to(self.device)
        prefer = torch.tensor(
            [0 if c is not None and n is not None and c.tokens[: len(n)] == n.tokens else -1
             for c, n in zip(copy, neural)],
            device=self.device,
        )
        best_slots = survival.amax(dim=1).cpu()  # [R, L]
        stale = self._stale_scores if self._stale_scores is not None else best_slots.reshape(-1)
        self._stale_scores = best_slots.reshape(-1)
        if self.step_seconds is None:
            current = Price(0.0, survival.shape[0] * length)
        else:
            current = price(self.step_seconds, len(candidates), stale)
        self.last_price = current
        choose_op, allocate_op = _operations(self.device)
        chosen, kept = choose_op(survival, current.per_token, prefer)
        rows = torch.arange(len(candidates), device=self.device)
        kept_scores = survival[rows, chosen]  # [R, L]
        slots = torch.arange(length, device=self.device)
        kept_scores = torch.where(slots[None, :] < kept[:, None], kept_scores, NEG_INF)
        admitted = allocate_op(kept_scores, current.budget).tolist()
        chosen = chosen.tolist()
        out: list[DraftChain | None] = []
        for i, n in enumerate(admitted):
            chain = (copy[i], neural[i])[chosen[i]]
            out.append(_truncated(chain, n) if chain is not None and n > 0 else None)
        return out


def _operations(device: torch.device):
    """The Triton kernels where the tensors are on a GPU, else the torch versions they equal."""
    if device.type == "cuda":
        try:
            from hsedit.kernels.triton_ops import allocate_triton, choose_triton

            return choose_triton, allocate_triton
        except ImportError:  # no triton: the torch code runs on the GPU as well
            pass
    return choose, allocate


def _by_source(chains: list[DraftChain], source: str) -> DraftChain | None:
    return next((c for c in chains if c.source == source), None)


def _survival(chain: DraftChain | None) -> list[float]:
    if chain is None:
        return []
    if chain.survival is None:
        raise ValueError(f"a {chain.source} chain reached the hybrid selector without survival estimates")
    return chain.survival


def _truncated(chain: DraftChain, n: int) -> DraftChain:
    if n >= len(chain):
        return chain
    return replace(
        chain,
        tokens=chain.tokens[:n],
        confidences=chain.confidences[:n] if chain.confidences is not None else None,
        survival=chain.survival[:n] if chain.survival is not None else None,
    )
