"""Hybrid Spark's price, per-request chain choice and batch allocation, as tensor code.

Shapes: R requests in the batch, C candidate chains per request (DSpark, copy), L slots.
Survival scores are a_k = P(draft tokens 1..k all accepted); padding slots hold -inf.

1. `price`: with R requests, K admitted draft slots and D seconds of drafting this step,
   goodput is Theta(K) = (R + S_K) / (T(R + K) + D), S_K the sum of the K best survival scores.
   At the best K*, the price of a verified slot is the break-even of the last admitted one,
   lambda = Theta(K* - 1) * (T(R + K*) - T(R + K* - 1)) (slot K* paid for itself, so its survival
   clears lambda), or Theta(0) * (T(R + 1) - T(R)) when no slot pays. (The next slot's cost
   would overshoot at a kink of T: from 64 to 256 tokens a CPU step's slope jumps, and a price
   above 1 admits nothing.) D = 0 is the price without drafting costs.
2. `model_drafting_mask`: the model drafter costs D(n) seconds for n requests, the copy drafter
   nearly nothing. A request's advantage is what its DSpark chain is expected to add over its
   copy chain, in verified tokens net of the price: max(0, u(DSpark estimate) - u(copy)) with
   u(a) = max_l sum_{j<=l} (a_j - lambda). Those D(n) seconds would earn Theta * D(n) tokens at
   the current goodput, so DSpark runs for the n requests with the largest advantages that
   maximise sum(advantages) - Theta * D(n): none when even the best cannot pay for the pass.
3. `choose`: per request, the chain with the larger u, cut to the slots with a_j > lambda;
   a copy chain that starts with the whole DSpark chain is kept instead.
4. `allocate`: a global top-K over the kept slots' survival (ties: earlier position, then earlier
   request), so each request's admitted slots form a prefix and at most K are verified.

Admission of slot k depends on a_k (made before x_k is known to the target) and never on the
target's own numbers, so verification stays exact (one-hot verification of every chain); which
drafters run only changes which chains exist, never what the target emits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from hsedit.drafting.chain import DSPARK, COPY, DraftChain

NEG_INF = float("-inf")


@dataclass(frozen=True)
class Price:
    per_token: float  # lambda: survival a slot needs to be worth verifying
    budget: int  # K*: draft slots the batch should verify
    goodput: float = 0.0  # Theta(K*): tokens per second at that budget


def price(
    step_seconds: torch.Tensor,  # [max_tokens + 1] T(B) for B = 0..max_tokens scheduled tokens
    num_requests: int,
    scores: torch.Tensor | Sequence[float],  # [N] survival of candidate slots (any order; -inf = none)
    draft_seconds: float = 0.0,  # D: drafting time of this step, paid whatever K is
) -> Price:
    if num_requests <= 0:
        return Price(0.0, 0)
    # In Python floats: a batch has a few hundred candidate slots at most, and between the
    # target's steps each tensor op costs tens of microseconds (seen: 0.25 ms a call as tensor
    # code, 1.5% of a bf16 step at batch 4).
    values = scores.tolist() if isinstance(scores, torch.Tensor) else scores
    ordered = sorted((s for s in values if math.isfinite(s)), reverse=True)  # [N'] best first
    max_k = min(len(ordered), len(step_seconds) - 2 - num_requests)
    if max_k < 0:  # not even one more token fits in a step
        return Price(float("inf"), 0)
    t = [s + draft_seconds for s in step_seconds[num_requests : num_requests + max_k + 2].tolist()]  # [max_k + 2] T(R + K) + D
    theta, gained = [], 0.0  # goodput Theta(K) = (R + S_K) / (T(R + K) + D) for K = 0..max_k
    for k in range(max_k + 1):
        theta.append((num_requests + gained) / t[k])
        if k < max_k:
            gained += ordered[k]
    best = max(range(max_k + 1), key=theta.__getitem__)  # first maximum: the smallest K that earns it
    if best == 0:  # what the first slot would have to earn
        per_token = theta[0] * (t[1] - t[0])
    else:  # the break-even of the last admitted slot: every admitted slot clears it
        per_token = theta[best - 1] * (t[best] - t[best - 1])
    return Price(per_token, best, theta[best])


def utility(survival: torch.Tensor, lam: float) -> torch.Tensor:
    """u = max_l sum_{j<=l} (a_j - lambda): expected verified tokens of a chain's best prefix,
    net of the price; survival [..., L] (-inf padding) -> [...]."""
    gain = torch.where(torch.isfinite(survival), survival - lam, torch.zeros_like(survival))
    return torch.cat([torch.zeros_like(gain[..., :1]), torch.cumsum(gain, dim=-1)], dim=-1).amax(dim=-1)


def model_drafting_mask(
    copy_survival: torch.Tensor,  # [R, L] each request's copy chain (-inf where none)
    model_estimate: torch.Tensor,  # [R, L] expected survival of its DSpark chain (-inf where none)
    price_now: Price,
    draft_seconds: torch.Tensor,  # [R + 1] D(n) for n = 0..R, D(0) = 0
) -> torch.Tensor:
    """Which requests the model drafter should run for this step [R] (bool)."""
    advantage = torch.clamp(utility(model_estimate, price_now.per_token) - utility(copy_survival, price_now.per_token), min=0)
    order = torch.sort(advantage, descending=True, stable=True).indices  # [R]
    gained = torch.cat([advantage.new_zeros(1), torch.cumsum(advantage[order], 0)])  # [R + 1]
    net = gained - price_now.goodput * draft_seconds[: len(gained)].to(gained.dtype)
    runs = int(torch.argmax(net))  # first maximum: the fewest requests that earn it
    mask = torch.zeros(len(advantage), dtype=torch.bool)
    mask[order[:runs]] = True
    return mask & (advantage > 0)


def choose(
    survival: torch.Tensor,  # [R, C, L] -inf where a chain has no slot
    lam: float,
    prefer: torch.Tensor | None = None,  # [R] chain index forced by the prefix rule, -1 = none
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per request: (chosen chain [R], kept length [R]); kept length 0 means no draft."""
    worth = (survival > lam).sum(dim=-1)  # [R, C] slots above the price: a prefix (survival decreases)
    # Ties go to the lower chain index (callers put the copy chain first: it costs nothing to draft).
    chosen = torch.argmax(utility(survival, lam), dim=-1)  # [R]
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
    kept = torch.isfinite(scores).sum(dim=1)  # [R]
    if int(kept.sum()) <= budget:  # every kept slot fits: nothing to rank
        return kept
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
    if len(hull) == 1:
        return torch.full((max_tokens + 1,), float(ys[0]))
    out = _piecewise_linear(xs, ys, max_tokens)
    return torch.maximum(out, ys[0]).float()  # flat below the smallest measured step


def _piecewise_linear(xs: torch.Tensor, ys: torch.Tensor, max_x: int) -> torch.Tensor:
    """Points (xs increasing, at least two) joined by lines, evaluated at 0..max_x; the first and
    last segments continue beyond the points, and no segment falls (slopes clamped at 0)."""
    x = torch.arange(max_x + 1, dtype=torch.float64)
    slopes = torch.clamp((ys[1:] - ys[:-1]) / (xs[1:] - xs[:-1]), min=0.0)
    segment = torch.clamp(torch.searchsorted(xs, x, right=True) - 1, 0, len(slopes) - 1)
    return ys[segment] + slopes[segment] * (x - xs[segment])


def pad(rows: list[list[float]], length: int) -> torch.Tensor:
    """Ragged survival lists -> [len(rows), length] with -inf padding."""
    padding = [NEG_INF] * length
    return torch.tensor([list(row[:length]) + padding[len(row):] for row in rows], dtype=torch.float32).reshape(len(rows), length)


def linear_seconds(counts: list[int], seconds: list[float], max_count: int) -> torch.Tensor:
    """D(n) for n = 0..max_count from timings at a few n: D(0) = 0, linear between the measured
    points (a pass has a fixed part, so D(1) is well above D(0)), the last slope continued."""
    xs = torch.tensor([0.0, *counts], dtype=torch.float64)
    ys = torch.tensor([0.0, *seconds], dtype=torch.float64)
    return _piecewise_linear(xs, ys, max_count).float()


# Weight of the newest model-drafter pass in the running ratio of seen to profiled drafting time.
DRAFT_SCALE_WEIGHT = 0.1


class HybridSelector:
    """Keeps one chain per request each step: the price, the choice, the batch allocation, and
    which requests the model drafter should run for."""

    def __init__(self, max_batch_tokens: int = 8192, device: str | torch.device = "cpu") -> None:
        self.max_batch_tokens = max_batch_tokens
        self.device = torch.device(device)  # where the choice and allocation run
        self.step_seconds: torch.Tensor | None = None  # [max_batch_tokens + 1], once profiled
        self.draft_seconds: torch.Tensor | None = None  # [max_batch_tokens + 1] D(n), once profiled
        self.draft_scale = 1.0  # running ratio of seen to profiled drafting time
        self.last_price: Price | None = None

    def set_costs(self, tokens: list[int], seconds: list[float]) -> None:
        """Measured step times (the engine's cost table) -> T(B) for every B."""
        self.step_seconds = convex_step_seconds(tokens, seconds, self.max_batch_tokens)

    def set_draft_costs(self, counts: list[int], seconds: list[float]) -> None:
        """Measured model-drafter passes (n requests, seconds) -> D(n) for every n."""
        self.draft_seconds = linear_seconds(counts, seconds, self.max_batch_tokens)

    def record_draft_time(self, count: int, seconds: float) -> None:
        """A pass seen while serving: the profile is scaled by a running ratio, so D(n) follows
        the machine (other load, a longer context) without re-profiling."""
        if self.draft_seconds is not None and self.draft_seconds[count] > 0:
            w = DRAFT_SCALE_WEIGHT
            self.draft_scale = (1 - w) * self.draft_scale + w * seconds / float(self.draft_seconds[count])

    def drafting_cost(self, count: int) -> float:
        return 0.0 if self.draft_seconds is None or count <= 0 else self.draft_scale * float(self.draft_seconds[count])

    def plan_model_drafting(
        self, copy: list[DraftChain | None], estimates: list[list[float] | None]
    ) -> list[bool]:
        """Per request of the batch: run the model drafter for it this step? Weighed at the
        price and goodput of this step without it (its copy chains only). Until the costs are
        profiled and every request has an estimate: run for all."""
        known = self.step_seconds is not None and self.draft_seconds is not None
        if not known or not copy or any(e is None for e in estimates):
            return [True] * len(copy)
        # Upper bound first (no tensors): no advantage exceeds an estimate's sum and goodput is at
        # least R / T(R), so if all estimates together cannot pay for one pass, none can.
        num_requests = min(len(copy), len(self.step_seconds) - 1)
        least_goodput = num_requests / float(self.step_seconds[num_requests])
        if sum(sum(e) for e in estimates) <= least_goodput * self.drafting_cost(1):
            return [False] * len(copy)
        # A request whose copy chain survives at least as well as its DSpark estimate at every
        # position has no advantage at any price (utility grows with survival, slot by slot), so
        # it is left out of the maths: on edits, where copies run long, that is nearly every step.
        contenders = [i for i, (c, e) in enumerate(zip(copy, estimates)) if not _dominates(c, e)]
        if not contenders:
            return [False] * len(copy)
        length = max([len(c) for c in copy if c is not None] + [len(e) for e in estimates] + [1])
        copy_survival = pad([_survival(c) for c in copy], length)  # [R, L]
        without = price(self.step_seconds, len(copy), copy_survival.reshape(-1))
        mask = model_drafting_mask(
            copy_survival[contenders], pad([estimates[i] for i in contenders], length), without,
            self.draft_scale * self.draft_seconds[: len(contenders) + 1],
        )
        runs = [False] * len(copy)
        for i, run in zip(contenders, mask.tolist()):
            runs[i] = run
        return runs

    def select(self, candidates: list[list[DraftChain]], drafted_for: int = 0) -> list[DraftChain | None]:
        """One chain (or none) per request; `drafted_for` requests had a model-drafter pass."""
        if not any(candidates):  # nothing drafted (text with nothing to copy): nothing to price
            self.last_price = None
            return [None] * len(candidates)
        copy = [_by_source(chains, COPY) for chains in candidates]
        neural = [_by_source(chains, DSPARK) for chains in candidates]
        if all(n is None for n in neural):
            return self._select_copies(copy, drafted_for)
        length = max([len(c) for chains in candidates for c in chains] or [1])
        copy_survival = pad([_survival(c) for c in copy], length)  # [R, L]
        survival = torch.stack([copy_survival, pad([_survival(n) for n in neural], length)], dim=1)  # [R, 2, L]
        best_slots = survival.amax(dim=1)  # [R, L]
        # The price is sized on this step's own candidates: their survival is fixed before the
        # target sees any draft token, and vLLM verifies every chain one-hot, so exactness holds.
        if self.step_seconds is None:
            current = Price(0.0, len(candidates) * length)
        else:
            current = price(self.step_seconds, len(candidates), best_slots.reshape(-1), self.drafting_cost(drafted_for))
        self.last_price = current
        choose_op, allocate_op = _operations(self.device)
        slots = torch.arange(length, device=self.device)
        survival = survival.to(self.device)  # [R, 2, L]: the copy chain first, so ties go to it
        prefer = torch.tensor(
            [0 if c is not None and n is not None and c.tokens[: len(n)] == n.tokens else -1
             for c, n in zip(copy, neural)],
            device=self.device,
        )
        chosen_t, kept = choose_op(survival, current.per_token, prefer)
        kept_scores = survival[torch.arange(len(candidates), device=self.device), chosen_t]  # [R, L]
        chosen = chosen_t.tolist()
        kept_scores = torch.where(slots[None, :] < kept[:, None], kept_scores, NEG_INF)
        admitted = allocate_op(kept_scores, current.budget).tolist()
        out: list[DraftChain | None] = []
        for i, n in enumerate(admitted):
            chain = (copy[i], neural[i])[chosen[i]]
            out.append(_truncated(chain, n) if chain is not None and n > 0 else None)
        return out

    def _select_copies(self, copy: list[DraftChain | None], drafted_for: int) -> list[DraftChain | None]:
        """`select` where only copy chains were proposed (no DSpark pass this step, the common
        case): nothing to choose between, so the price and each request's slots above it in
        Python floats (tensor ops between the target's steps cost more than the maths here)."""
        survival = [_survival(c) for c in copy]  # [R][len of its chain]
        if self.step_seconds is None:
            current = Price(0.0, sum(len(s) for s in survival))
        else:
            current = price(self.step_seconds, len(copy), [a for s in survival for a in s], self.drafting_cost(drafted_for))
        self.last_price = current
        kept = [sum(1 for a in s if a > current.per_token) for s in survival]  # [R] a prefix: survival decreases
        if sum(kept) > current.budget:  # more kept slots than the batch should verify: the best of them
            allocate_op = _operations(self.device)[1]
            kept = allocate_op(pad([s[:k] for s, k in zip(survival, kept)], max(kept)).to(self.device), current.budget).tolist()
        return [_truncated(c, k) if c is not None and k > 0 else None for c, k in zip(copy, kept)]


def _dominates(chain: DraftChain | None, estimate: list[float]) -> bool:
    """Whether a copy chain's survival is at least the estimate's wherever the estimate expects
    anything (a position it gives 0 earns nothing at any price)."""
    if chain is None:
        return not any(a > 0 for a in estimate)
    survival = _survival(chain)
    return all(j < len(survival) and survival[j] >= a for j, a in enumerate(estimate) if a > 0)


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
