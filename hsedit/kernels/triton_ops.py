"""Triton kernels for the GPU path of hybrid drafting, each equal to a torch reference.

- `choose_kernel`: the per-request chain choice (`hsedit.drafting.hybrid.choose`).
- `admit_kernel`: the global top-K allocation of verification slots (`hsedit.drafting.hybrid.allocate`):
  a slot is admitted iff fewer than `budget` slots come before it in the order (higher score,
  then earlier position, then earlier request), so no sort is needed.

Tested on CPU under TRITON_INTERPRET=1 (tests/test_kernels.py); `hsedit.drafting.hybrid` calls the
wrappers when its tensors live on a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def choose_kernel(
    survival_ptr,  # [R, C, L] float32, -inf past each chain's end
    prefer_ptr,  # [R] int32, -1 = no forced chain
    chosen_ptr,  # [R] int64 out
    kept_ptr,  # [R] int64 out
    lam,
    C: tl.constexpr,
    L: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK_L)
    best_utility = tl.full([], -1.0, tl.float32)
    best_chain = tl.full([], 0, tl.int32)
    kept_by_chain_0 = tl.full([], 0, tl.int32)
    best_kept = tl.full([], 0, tl.int32)
    for c in tl.static_range(C):
        s = tl.load(survival_ptr + (r * C + c) * L + offs, mask=offs < L, other=float("-inf"))
        finite = s > float("-inf")
        gain = tl.where(finite, s - lam, 0.0)
        utility = tl.maximum(tl.max(tl.cumsum(gain, axis=0), axis=0), 0.0)
        worth = tl.sum((s > lam).to(tl.int32), axis=0)
        if c == 0:
            kept_by_chain_0 = worth
        better = utility > best_utility  # strict: ties keep the lower chain index
        best_kept = tl.where(better, worth, best_kept)
        best_chain = tl.where(better, c, best_chain)
        best_utility = tl.where(better, utility, best_utility)
    prefer = tl.load(prefer_ptr + r)
    forced = prefer >= 0
    # The prefix rule only ever forces chain 0 (the copy chain), as hybrid.choose's callers do.
    best_chain = tl.where(forced, prefer, best_chain)
    best_kept = tl.where(forced, kept_by_chain_0, best_kept)
    tl.store(chosen_ptr + r, best_chain.to(tl.int64))
    tl.store(kept_ptr + r, best_kept.to(tl.int64))


@triton.jit
def admit_kernel(
    scores_ptr,  # [N] float32, position-major (slot i = position * R + request), -inf = none
    admitted_ptr,  # [N] int32 out
    budget,
    N,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    mine = pid * BLOCK + tl.arange(0, BLOCK)
    my_scores = tl.load(scores_ptr + mine, mask=mine < N, other=float("-inf"))
    ahead = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(0, N, BLOCK):
        other = start + tl.arange(0, BLOCK)
        other_scores = tl.load(scores_ptr + other, mask=other < N, other=float("-inf"))
        before = (other_scores[None, :] > my_scores[:, None]) | (
            (other_scores[None, :] == my_scores[:, None]) & (other[None, :] < mine[:, None])
        )
        before = before & (other[None, :] < N)
        ahead += tl.sum(before.to(tl.int32), axis=1)
    admitted = (ahead < budget) & (my_scores > float("-inf"))
    tl.store(admitted_ptr + mine, admitted.to(tl.int32), mask=mine < N)


# -- wrappers -------------------------------------------------------------------------------------
def choose_triton(survival: torch.Tensor, lam: float, prefer: torch.Tensor | None = None):
    R, C, L = survival.shape
    if prefer is None:
        prefer = torch.full((R,), -1, dtype=torch.int32, device=survival.device)
    if prefer.ne(-1).any() and prefer[prefer >= 0].ne(0).any():
        raise ValueError("the prefix rule forces the copy chain, index 0")
    chosen = torch.empty(R, dtype=torch.int64, device=survival.device)
    kept = torch.empty(R, dtype=torch.int64, device=survival.device)
    if R:
        choose_kernel[(R,)](
            survival.float().contiguous(), prefer.to(torch.int32).contiguous(), chosen, kept, float(lam),
            C=C, L=L, BLOCK_L=triton.next_power_of_2(max(L, 1)),
        )
    return chosen, kept


def allocate_triton(scores: torch.Tensor, budget: int) -> torch.Tensor:
    R, L = scores.shape
    if budget <= 0 or scores.numel() == 0:
        return torch.zeros(R, dtype=torch.long, device=scores.device)
    flat = scores.t().contiguous().reshape(-1).float()  # position-major
    admitted = torch.empty(flat.numel(), dtype=torch.int32, device=scores.device)
    block = 64
    admit_kernel[(triton.cdiv(flat.numel(), block),)](flat, admitted, int(budget), flat.numel(), BLOCK=block)
    return admitted.view(L, R).sum(dim=0).long()
