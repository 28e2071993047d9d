"""The Triton kernels equal their torch versions (run on CPU under TRITON_INTERPRET=1, which
conftest.py sets before anything can import Triton)."""

import pytest
import torch

from hsedit.drafting.hybrid import allocate, choose, pad

triton_ops = pytest.importorskip("hsedit.kernels.triton_ops", reason="triton is not installed")


def random_survival(g, requests, chains, length, empty_share=0.2):
    conditional = torch.rand(requests, chains, length, generator=g) * 0.6 + 0.4
    survival = conditional.cumprod(dim=-1)
    cut = torch.randint(0, length + 1, (requests, chains), generator=g)
    cut[torch.rand(requests, chains, generator=g) < empty_share] = 0  # empty drafts
    survival[torch.arange(length)[None, None, :] >= cut[..., None]] = float("-inf")
    return survival


@pytest.mark.parametrize("seed", range(6))
def test_choice_kernel_equals_torch(seed):
    g = torch.Generator().manual_seed(seed)
    survival = random_survival(g, 9, 2, 15)
    prefer = torch.where(torch.rand(9, generator=g) < 0.3, 0, -1)
    for lam in (0.0, 0.2, 0.55, 0.9, 1.5):
        expected = choose(survival, lam, prefer)
        got = triton_ops.choose_triton(survival, lam, prefer)
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), lam


def test_choice_kernel_ties_and_empty_chains():
    tie = torch.stack([pad([[0.8, 0.6]], 3), pad([[0.8, 0.6]], 3)], dim=1)  # equal chains: the first
    empty = torch.full((1, 2, 3), float("-inf"))
    survival = torch.cat([tie, empty])
    for lam in (0.0, 0.7):
        assert [t.tolist() for t in triton_ops.choose_triton(survival, lam)] == [
            t.tolist() for t in choose(survival, lam)
        ]


@pytest.mark.parametrize("seed", range(6))
def test_allocation_kernel_equals_torch(seed):
    g = torch.Generator().manual_seed(seed)
    scores = random_survival(g, 11, 1, 15)[:, 0]
    # adversarial: quantised scores make ties everywhere
    if seed % 2:
        scores = torch.where(torch.isfinite(scores), (scores * 4).round() / 4, scores)
    total = int(torch.isfinite(scores).sum())
    for budget in (0, 1, 7, total // 2, total, total + 5):
        assert torch.equal(triton_ops.allocate_triton(scores, budget), allocate(scores, budget)), budget


def test_allocation_kernel_full_budget_and_all_empty():
    scores = pad([[0.9, 0.9, 0.9], [0.9], []], 3)
    assert triton_ops.allocate_triton(scores, 100).tolist() == [3, 1, 0]
    assert triton_ops.allocate_triton(pad([[], []], 4), 5).tolist() == [0, 0]
