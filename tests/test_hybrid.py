"""Hybrid Spark's price, choice and allocation (pure tensor code), with property tests."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hsedit.drafting.chain import DSPARK, COPY, CopyFeatures, DraftChain
from hsedit.drafting.copy_acceptance import (
    MAX_OFFSET,
    PRIOR_POSITIONS,
    CopyAcceptanceModel,
    RequestOffset,
    VerifiedChain,
    fit_model,
    judged_labels,
    labelled_positions,
    map_offset,
    position_features,
)
from hsedit.drafting.hybrid import (
    HybridSelector,
    allocate,
    choose,
    convex_step_seconds,
    model_drafting_mask,
    pad,
    price,
)

# survival chains: non-increasing values in (0, 1]
chain_strategy = st.lists(st.floats(0.01, 1.0), min_size=0, max_size=8).map(
    lambda c: np.cumprod(sorted(c, reverse=True)).tolist() if c else []
)
batch_strategy = st.lists(chain_strategy, min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(batch_strategy, st.integers(0, 40))
def test_allocation_admits_prefixes_within_budget(chains, budget):
    scores = pad(chains, 8)
    admitted = allocate(scores, budget)
    assert int(admitted.sum()) <= budget
    assert int(admitted.sum()) == min(budget, sum(len(c) for c in chains))
    for row, n in zip(chains, admitted.tolist()):
        assert n <= len(row)  # a prefix of the request's own slots, never padding
    # every admitted slot scores at least as well as every slot left out, as allocate saw them
    # (float32: 0.9999999999999999 and 1.0 are the same score there)
    seen = [scores[i, : len(row)].tolist() for i, row in enumerate(chains)]
    taken = [s for row, n in zip(seen, admitted.tolist()) for s in row[:n]]
    left = [s for row, n in zip(seen, admitted.tolist()) for s in row[n:]]
    if taken and left:
        assert min(taken) >= max(left)


def test_allocation_ties_go_to_earlier_positions_then_earlier_requests():
    scores = pad([[0.9, 0.5], [0.9, 0.5], [0.5]], 2)
    assert allocate(scores, 2).tolist() == [1, 1, 0]  # the two 0.9s
    assert allocate(scores, 3).tolist() == [1, 1, 1]  # of the 0.5s, position 0 (request 2) first
    assert allocate(scores, 4).tolist() == [2, 1, 1]  # then request 0 before request 1
    # A larger budget only ever admits more: every request keeps what a smaller one gave it.
    for budget in range(5):
        assert all(a <= b for a, b in zip(allocate(scores, budget).tolist(), allocate(scores, budget + 1).tolist()))


def linear_costs(n=300, base=0.05, per_token=0.002):
    return torch.tensor([base + per_token * b for b in range(n)])


@settings(max_examples=100, deadline=None)
@given(batch_strategy, st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_a_higher_price_never_admits_more(chains, low, high):
    low, high = sorted([low, high])
    survival = torch.stack([pad(chains, 8), pad([c[:3] for c in chains], 8)], dim=1)
    _, kept_low = choose(survival, low)
    _, kept_high = choose(survival, high)
    assert int(kept_high.sum()) <= int(kept_low.sum())


def test_choice_keeps_the_chain_with_more_expected_tokens_net_of_price():
    copy = [0.9, 0.8, 0.3, 0.2]
    neural = [0.95, 0.9, 0.85, 0.8, 0.7]
    survival = torch.stack([pad([copy], 5), pad([neural], 5)], dim=1)
    chosen, kept = choose(survival, 0.5)
    assert chosen.tolist() == [1] and kept.tolist() == [5]
    chosen, kept = choose(survival, 0.88)  # only the first slots pay: copy 0.9 vs neural 0.95, 0.9
    assert chosen.tolist() == [1] and kept.tolist() == [2]


def test_prefix_rule_keeps_the_copy_chain():
    survival = torch.stack([pad([[0.5, 0.4, 0.3, 0.2]], 4), pad([[0.9, 0.8]], 4)], dim=1)
    chosen, kept = choose(survival, 0.1, prefer=torch.tensor([0]))
    assert chosen.tolist() == [0] and kept.tolist() == [4]


def test_price_is_low_alone_and_rises_with_the_batch():
    costs = linear_costs()
    alone = price(costs, 1, torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5]))
    crowded = price(costs, 64, torch.rand(64 * 8, generator=torch.Generator().manual_seed(0)))
    assert alone.per_token < crowded.per_token
    assert alone.budget == 5  # every slot pays when the step costs little more per token
    # Goodput at the chosen budget is the best over all budgets.
    scores = torch.tensor([0.9, 0.2, 0.1])
    p = price(costs, 1, scores)
    goodput = [(1 + float(scores.sort(descending=True).values[:k].sum())) / float(costs[1 + k]) for k in range(4)]
    assert p.budget == int(np.argmax(goodput))


def test_price_with_flat_costs_admits_everything_for_free():
    p = price(torch.full((100,), 0.05), 2, torch.tensor([0.3, 0.1]))
    assert p.per_token == 0.0 and p.budget == 2


def chain(source, tokens, survival):
    return DraftChain(source, tokens, survival=survival)


def test_selector_applies_the_prefix_rule_and_truncates_at_the_price():
    selector = HybridSelector(max_batch_tokens=64)
    selector.set_costs([1, 8, 16], [0.06, 0.13, 0.21])
    copy = chain(COPY, [1, 2, 3, 4, 5, 6], [0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    neural = chain(DSPARK, [1, 2], [0.9, 0.8])
    [kept] = selector.select([[copy, neural]])
    # The DSpark chain is a prefix of the copy chain: the copy chain is kept, its first slots
    # scored as the better of the two (0.9, 0.8, then its own 0.4, 0.3, ...), and cut where a
    # slot no longer pays the price (0.34 a token here): three slots.
    assert selector.last_price.per_token == pytest.approx(0.3375, abs=1e-3)
    assert kept.source == COPY and kept.tokens == [1, 2, 3]
    other = chain(DSPARK, [7, 8], [0.9, 0.8])
    [kept] = selector.select([[copy, other]])
    assert kept.source == DSPARK
    assert selector.last_price is not None and selector.last_price.per_token > 0


def test_selector_without_costs_keeps_the_longest_expected_chain():
    selector = HybridSelector(max_batch_tokens=64)
    kept = selector.select([[chain(COPY, [1, 2, 3], [0.2, 0.1, 0.05])], [], [chain(DSPARK, [4], [0.9])]])
    assert [c.tokens if c else None for c in kept] == [[1, 2, 3], None, [4]]


def test_a_step_with_nothing_drafted_is_not_priced():
    """Text with nothing to copy: no chain, no price (the live view keeps the last priced one)."""
    selector = HybridSelector(max_batch_tokens=64)
    selector.set_costs([1, 8, 16], [0.06, 0.13, 0.21])
    selector.select([[chain(COPY, [1, 2], [0.6, 0.5])], []])
    assert selector.last_price is not None
    assert selector.select([[], []]) == [None, None] and selector.last_price is None


def test_copy_positions_are_labelled_only_where_verified():
    f = CopyFeatures(match_len=5, num_candidates=1, candidates_agree=True, source_distance=40)
    rows, labels, owner = labelled_positions(
        [VerifiedChain(f, drafted=6, accepted=2), VerifiedChain(f, drafted=3, accepted=3)]
    )
    assert labels.tolist() == [1, 1, 0, 1, 1, 1]  # k = 1..3 judged, then 1..3 all accepted
    assert owner.tolist() == [0, 0, 0, 1, 1, 1]
    assert rows[0, 5] == 1 and rows[1, 5] == 0  # the first position apart
    assert rows[2, 4] == 2


def test_copy_model_recovers_a_known_rule_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    truth = np.array([0.5, 0.6, 1.2, 0.3, -0.25, 0.4])
    chains = []
    for _ in range(3000):
        match = int(rng.integers(3, 60))
        f = CopyFeatures(match, int(rng.integers(1, 4)), bool(rng.random() < 0.6), int(rng.integers(5, 900)))
        model = CopyAcceptanceModel(tuple(truth))
        p = model.conditional(f, 15)
        accepted = int(np.argmin(np.r_[rng.random(15) < p, False]))
        chains.append(VerifiedChain(f, 15, accepted))
    fitted = fit_model(chains, model="tiny", fit_on="synthetic")
    assert np.allclose(fitted.coefficients, truth, atol=0.25)
    fitted.save(tmp_path / "c.json")
    again = CopyAcceptanceModel.load(tmp_path / "c.json")
    assert again == fitted
    survival = again.survival(chains[0].features, 10)
    assert all(b <= a for a, b in zip(survival, survival[1:]))
    assert math.isclose(survival[0], again.conditional(chains[0].features, 1)[0])


def test_fitting_refuses_data_without_both_outcomes():
    f = CopyFeatures(5, 1, True, 10)
    with pytest.raises(ValueError):
        fit_model([VerifiedChain(f, 3, 3)] * 20)


def test_step_costs_are_convex_and_ignore_a_noisy_cliff():
    t = convex_step_seconds([1, 4, 8, 16, 32, 64], [0.3, 0.45, 0.45, 0.55, 1.4, 1.41], 128)
    marginal = t[1:] - t[:-1]
    assert torch.all(marginal[1:] >= marginal[:-1] - 1e-6)  # convex
    assert torch.all(t[1:] >= t[:-1])  # monotone
    assert float(t[32]) < 1.4  # the outlier at 32 sits above the envelope
    assert float(t[1]) == pytest.approx(0.3) and float(t[0]) == pytest.approx(0.3)
    assert float(t[128]) > float(t[64])  # the last slope continues


def one_hot_verify(chain, prefix, probs, rng):
    """Reference verification of a draft with no draft distribution: accept x with probability
    p(x); on rejection draw from p without x; if all pass, draw a bonus token."""
    out = list(prefix)
    for x in chain:
        p = probs[out[-1]]
        if rng.random() < p[x]:
            out.append(x)
            continue
        residual = p.copy()
        residual[x] = 0.0
        out.append(int(rng.choice(len(p), p=residual / residual.sum())))
        return out
    out.append(int(rng.choice(len(probs), p=probs[out[-1]])))
    return out


def test_one_hot_verification_of_the_selectors_chains_samples_the_target_distribution():
    """Sampling stays exact with drafts: a Markov 'target' over 5 tokens, both drafters
    proposing every step and the hybrid selector choosing (by price, prefix rule, allocation),
    one-hot verification; the first 3 tokens' joint distribution matches direct sampling.

    Exactness is the verifier's, for any draft (vLLM's rejection sampler does this on GPU); what
    it asks of the selector is that it drafts only what a drafter proposed, decided before the
    target samples: each step's kept chain is checked to be a prefix of a proposed one."""
    from collections import Counter

    from tests.test_hybrid_engine import chi_square_p_value

    rng = np.random.default_rng(0)
    vocab = 5
    probs = rng.dirichlet(np.full(vocab, 0.7), size=vocab)  # p(next | previous)
    selector = HybridSelector(max_batch_tokens=64)
    selector.set_costs([1, 4, 16], [0.05, 0.06, 0.1])

    def sample_hybrid():
        seq = [0]
        while len(seq) < 4:
            last = seq[-1]
            copy = chain(COPY, [(last + 1) % vocab, (last + 2) % vocab, 0], [0.6, 0.4, 0.2])
            greedy = [int(np.argmax(probs[last]))]
            greedy.append(int(np.argmax(probs[greedy[-1]])))
            neural = chain(DSPARK, greedy, [0.7, 0.5])
            [kept] = selector.select([[copy, neural]])
            assert kept is None or any(
                kept.source == c.source and kept.tokens == c.tokens[: len(kept)] for c in (copy, neural)
            ), kept
            seq = one_hot_verify(kept.tokens if kept else [], seq, probs, rng)
        return tuple(seq[1:4])

    def sample_plain():
        seq = [0]
        for _ in range(3):
            seq.append(int(rng.choice(vocab, p=probs[seq[-1]])))
        return tuple(seq[1:])

    def sample_broken():  # accepts every draft: what a wrong verifier does
        seq = [0]
        while len(seq) < 4:
            seq += [(seq[-1] + 1) % vocab]
        return tuple(seq[1:4])

    n = 6000
    plain = Counter(sample_plain() for _ in range(n))
    hybrid = Counter(sample_hybrid() for _ in range(n))
    assert chi_square_p_value(plain, hybrid) > 0.001
    broken = Counter(sample_broken() if i % 2 else sample_plain() for i in range(n))
    assert chi_square_p_value(plain, broken) < 0.001


# -- drafting cost: the price and which requests the model drafter runs for -------------------
@settings(max_examples=60, deadline=None)
@given(batch_strategy, st.integers(1, 8))
def test_zero_drafting_cost_is_the_price_without_it(chains, num_requests):
    scores = pad(chains, 8).reshape(-1)
    assert price(linear_costs(), num_requests, scores, 0.0) == price(linear_costs(), num_requests, scores)


def test_drafting_time_in_the_step_lowers_goodput_and_never_shrinks_the_budget():
    scores = torch.tensor([0.9, 0.6, 0.3, 0.2, 0.1])
    free = price(linear_costs(), 2, scores)
    paid = price(linear_costs(), 2, scores, draft_seconds=0.04)
    assert paid.goodput < free.goodput
    assert paid.budget >= free.budget  # a longer step makes one more slot relatively cheaper


def drafting_costs(fixed, per_request, n=16):
    return torch.tensor([0.0] + [fixed + per_request * k for k in range(1, n + 1)])


@settings(max_examples=100, deadline=None)
@given(batch_strategy, batch_strategy, st.floats(0.0, 0.05), st.floats(0.0, 0.05))
def test_a_more_expensive_model_drafter_runs_for_no_more_requests(copy, estimate, cheap, dear):
    cheap, dear = sorted([cheap, dear])
    rows = min(len(copy), len(estimate))
    copy_survival, estimates = pad(copy[:rows], 8), pad(estimate[:rows], 8)
    now = price(linear_costs(), rows, copy_survival.reshape(-1))
    runs_cheap = model_drafting_mask(copy_survival, estimates, now, drafting_costs(cheap, cheap / 4))
    runs_dear = model_drafting_mask(copy_survival, estimates, now, drafting_costs(dear, dear / 4))
    assert int(runs_dear.sum()) <= int(runs_cheap.sum())


def test_the_model_drafter_runs_only_where_its_chain_can_beat_the_copy_chain_and_pay_for_itself():
    copy = pad([[0.99] * 8, [], [0.5, 0.2]], 8)  # a confident copy, no copy, a weak copy
    estimate = pad([[0.9, 0.8, 0.6], [0.9, 0.8, 0.6], [0.9, 0.8, 0.6]], 8)
    now = price(linear_costs(), 3, copy.reshape(-1))
    free = model_drafting_mask(copy, estimate, now, torch.zeros(4))
    assert free.tolist() == [False, True, True]  # never for the request whose copy chain wins
    dear = model_drafting_mask(copy, estimate, now, drafting_costs(10.0, 1.0, 3))
    assert dear.tolist() == [False, False, False]  # a pass dearer than anything it can earn


def test_selector_plans_for_all_until_costs_and_estimates_exist():
    selector = HybridSelector(max_batch_tokens=64)
    copy = [chain(COPY, [1, 2, 3], [0.99, 0.98, 0.97]), None]
    assert selector.plan_model_drafting(copy, [[0.5, 0.2], [0.5, 0.2]]) == [True, True]
    selector.set_costs([1, 8, 16], [0.06, 0.13, 0.21])
    selector.set_draft_costs([1, 4], [0.01, 0.02])
    assert selector.plan_model_drafting(copy, [None, [0.5, 0.2]]) == [True, True]
    assert selector.plan_model_drafting(copy, [[0.5, 0.2], [0.9, 0.9]]) == [False, True]


def test_drafting_cost_follows_what_the_passes_really_take():
    selector = HybridSelector(max_batch_tokens=64)
    selector.set_draft_costs([1, 4, 16], [0.010, 0.016, 0.040])
    assert selector.drafting_cost(0) == 0.0
    assert selector.drafting_cost(1) == pytest.approx(0.010) and selector.drafting_cost(2) == pytest.approx(0.012)
    for _ in range(50):
        selector.record_draft_time(1, 0.020)  # the machine got busier: twice the profile
    assert selector.drafting_cost(4) == pytest.approx(0.032, rel=0.02)


def test_a_kink_in_the_step_costs_does_not_price_out_slots_that_pay():
    """A CPU cost table whose slope jumps past 64 tokens: with 4 requests and 60 sure slots,
    the best budget is all of them and the price must let them through."""
    selector = HybridSelector(max_batch_tokens=512)
    selector.set_costs([1, 4, 8, 16, 32, 64, 256], [0.021, 0.021, 0.0236, 0.0278, 0.0401, 0.0692, 0.4177])
    chains = [[chain(COPY, list(range(15)), [0.95 - 0.001 * k for k in range(15)])] for _ in range(4)]
    selector.select(chains)  # the first step prices on its own scores
    kept = selector.select(chains)
    assert selector.last_price.budget == 60 and selector.last_price.per_token < 0.9
    assert [len(c) for c in kept] == [15, 15, 15, 15]


def test_a_requests_copy_estimates_follow_what_its_verification_shows():
    """The fit is for general text; a request whose copies are always kept learns to trust them
    more, one whose copies are always cut learns to trust them less, within a few steps."""
    # A fit of its own (the shipped one's values on 2026-12-02): a refit ships without moving this test.
    model = CopyAcceptanceModel(coefficients=(-0.8233, 0.4708, 0.9018, 0.6950, 0.1077, -0.3897))
    f = CopyFeatures(match_len=4, num_candidates=2, candidates_agree=True, source_distance=120)
    kept, cut = RequestOffset(), RequestOffset()
    for _ in range(3):
        kept.observe_logits(model.logits(f, 12), judged_labels(VerifiedChain(f, drafted=12, accepted=12)))
        cut.observe_logits(model.logits(f, 1), judged_labels(VerifiedChain(f, drafted=12, accepted=0)))
    base = model.survival(f, 12)
    assert model.survival(f, 12, 0.0) == base
    assert all(a > b for a, b in zip(model.survival(f, 12, kept.value), base))
    assert model.survival(f, 12, kept.value)[-1] > 0.5 > base[-1]  # three steps move the 12th slot from 0.32
    assert all(a < b for a, b in zip(model.survival(f, 12, cut.value), base))
    nothing = RequestOffset(prior=0.5)
    nothing_verified = judged_labels(VerifiedChain(f, drafted=0, accepted=0))
    assert nothing.observe_logits(model.logits(f, 0), nothing_verified) == 0.5  # nothing verified, nothing learnt


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 200), st.booleans(), st.integers(0, 20), st.integers(0, 20),
       st.lists(st.floats(-2, 2), min_size=6, max_size=6))
def test_the_closed_form_logits_are_the_design_rows_times_the_coefficients(match, agree, drafted, accepted, coefficients):
    model = CopyAcceptanceModel(tuple(coefficients))
    f = CopyFeatures(match_len=match, num_candidates=2, candidates_agree=agree, source_distance=50)
    expected = position_features(f, drafted) @ np.asarray(coefficients)
    assert np.allclose(model.logits(f, drafted), expected, atol=1e-9)
    # A request's offset learns from them as from the labelled design rows.
    chain = VerifiedChain(f, drafted, min(accepted, drafted))
    rows, labels, _ = labelled_positions([chain])
    by_rows = RequestOffset(prior=0.2)
    by_rows.observe_logits(rows @ np.asarray(coefficients), labels)
    by_logits = RequestOffset(prior=0.2).observe_logits(model.logits(f, len(labels)), labels)
    assert by_logits == pytest.approx(by_rows.value, abs=1e-9)


def test_the_offset_is_the_minimum_of_its_penalised_log_loss():
    rng = np.random.default_rng(0)
    logits = rng.normal(0.5, 1.5, 200)
    labels = (rng.random(200) < 0.9).astype(float)
    found = map_offset(logits, labels, prior=-0.3)
    grid = np.linspace(-MAX_OFFSET, MAX_OFFSET, 8001)
    z = logits[None, :] + grid[:, None]
    loss = np.sum(np.logaddexp(0, z) - labels * z, axis=1) + PRIOR_POSITIONS / 8 * (grid + 0.3) ** 2
    assert found == pytest.approx(grid[np.argmin(loss)], abs=2e-3)
    assert map_offset(logits[:0], labels[:0], prior=-0.3) == pytest.approx(-0.3)  # no data: the prior
    assert map_offset(np.full(50, 3.0), np.zeros(50), prior=0.0) == -MAX_OFFSET  # clamped


@settings(max_examples=60, deadline=None)
@given(batch_strategy)
def test_copy_only_steps_select_as_the_two_chain_path_does(chains):
    """Where the DSpark pass was skipped the selector takes a shortcut; a DSpark chain that can
    never win (survival 0) must not change what it keeps."""
    selector = HybridSelector(max_batch_tokens=256)
    selector.set_costs([1, 16, 64], [0.030, 0.034, 0.050])
    copy = [[chain(COPY, list(range(len(c))), c)] if c else [] for c in chains]
    hopeless = [cs + [chain(DSPARK, [999], [0.0])] for cs in copy]
    fast = selector.select(copy)
    full = selector.select(hopeless)
    assert [c.tokens if c else None for c in fast] == [c.tokens if c and c.source == COPY else None for c in full]


@settings(max_examples=150, deadline=None)
@given(batch_strategy, batch_strategy, st.floats(0.0, 0.02))
def test_the_drafting_plan_leaves_out_only_requests_it_would_never_run_for(copy, estimate, fixed):
    """The plan skips the maths for requests whose copy chain dominates their estimate: it must
    answer exactly as the mask over every request does."""
    rows = min(len(copy), len(estimate))
    selector = HybridSelector(max_batch_tokens=256)
    selector.set_costs([1, 16, 64], [0.030, 0.034, 0.050])
    selector.set_draft_costs([1, 4], [fixed + 0.001, fixed + 0.002])
    chains = [chain(COPY, list(range(len(c))), c) if c else None for c in copy[:rows]]
    estimates = [e + [0.0] * (8 - len(e)) for e in estimate[:rows]]  # as the planner pads them
    copy_survival = pad(copy[:rows], 8)
    without = price(selector.step_seconds, rows, copy_survival.reshape(-1))
    full = model_drafting_mask(copy_survival, pad(estimates, 8), without, selector.draft_seconds[: rows + 1])
    assert selector.plan_model_drafting(chains, estimates) == full.tolist()


# survival exact in float32 (multiples of 1/256), so the tensor path and the Python one see the
# same numbers
exact_chain_strategy = st.lists(st.integers(1, 256), min_size=0, max_size=12).map(
    lambda c: [v / 256 for v in sorted(c, reverse=True)]
)


@settings(max_examples=150, deadline=None)
@given(st.lists(exact_chain_strategy, min_size=1, max_size=8), st.floats(0.0005, 0.01))
def test_a_step_of_copy_chains_only_is_selected_as_the_tensor_code_does(chains, per_token):
    """Copy chains alone are priced and cut in Python floats: the same chains come out as the
    price, the cut above it and the batch allocation in tensor code give."""
    selector = HybridSelector(max_batch_tokens=299)
    costs = linear_costs(per_token=per_token)
    selector.step_seconds = costs
    features = CopyFeatures(match_len=4, num_candidates=1, candidates_agree=True, source_distance=10)
    candidates = [[DraftChain(COPY, list(range(len(s))), copy_features=features, survival=s)] if s else []
                  for s in chains]
    got = [len(c) if c is not None else 0 for c in selector.select(candidates)]
    length = max(len(s) for s in chains) or 1
    survival = pad(chains, length)  # [R, L]
    expected_price = price(costs, len(chains), survival.reshape(-1))
    kept = (survival > expected_price.per_token).sum(dim=-1)
    slots = torch.arange(length)
    scores = torch.where(slots[None, :] < kept[:, None], survival, float("-inf"))
    assert got == allocate(scores, expected_price.budget).tolist()
    assert selector.last_price == (expected_price if any(chains) else None)
