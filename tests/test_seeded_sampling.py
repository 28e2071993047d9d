"""Seeded sampling's maths, without an engine: each draw is a sample of softmax(logits / T), and
it is a function of (seed, position) alone."""

from collections import Counter

import torch

from hsedit.drafting.seeded_sampling import draw, pin, uniform


def test_draws_follow_the_tempered_softmax():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, 0.0, -30.0])
    temperature = 0.7
    n = 20_000
    rows = logits.expand(n, -1)
    tokens = draw(rows, torch.full((n,), temperature), torch.tensor([uniform(7, p) for p in range(n)], dtype=torch.float64))
    counts = Counter(tokens.tolist())
    expected = torch.softmax(logits / temperature, dim=-1) * n
    # Chi-square against the exact probabilities (5 degrees of freedom; the draws are fixed by
    # the seed, so this cannot fail by chance): 20.5 is the 0.001 quantile's bound.
    stat = sum((counts.get(v, 0) - float(e)) ** 2 / float(e) for v, e in enumerate(expected[:5]))
    assert stat < 20.5, (stat, counts)
    assert counts.get(5, 0) == 0  # a token of probability ~1e-19 is never drawn in 20,000


def test_a_draw_depends_on_seed_and_position_only():
    assert uniform(3, 10) == uniform(3, 10)
    draws = {uniform(s, p) for s in range(20) for p in range(50)}
    assert len(draws) == 1000 and all(0.0 <= u < 1.0 for u in draws)
    assert abs(sum(draws) / len(draws) - 0.5) < 0.03


def test_pin_leaves_only_the_drawn_token_in_the_rows_it_is_given():
    torch.manual_seed(0)
    logits = torch.randn(4, 50)
    before = logits.clone()
    pin(logits, rows=[1, 3], seeds=[5, 5], temperatures=[1.0, 0.5], positions=[12, 13])
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    for row, temperature, position in ((1, 1.0, 12), (3, 0.5, 13)):
        token = int(logits[row].argmax())
        assert logits[row].isfinite().sum() == 1 and logits[row, token] == 0.0
        u = torch.tensor([uniform(5, position)], dtype=torch.float64)
        assert token == int(draw(before[row : row + 1], torch.tensor([temperature]), u)[0])
    # the same row scored alone, or beside others, draws the same token
    alone = before[3:4].clone()
    pin(alone, rows=[0], seeds=[5], temperatures=[0.5], positions=[13])
    assert int(alone[0].argmax()) == int(logits[3].argmax())
