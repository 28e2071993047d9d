"""The copy drafter's index: exact longest matches, incremental, real continuations."""

import random

import numpy as np

from hypothesis import given, settings
from hypothesis import strategies as st

from hsedit.drafting.chain import COPY
from hsedit.drafting.copy_drafter import CopyIndex

token_lists = st.lists(st.integers(min_value=0, max_value=4), min_size=0, max_size=120)


def test_proposes_what_followed_the_earlier_occurrence():
    index = CopyIndex(min_match=2)
    index.extend([5, 6, 7, 8, 9, 1, 5, 6])
    chain = index.propose(max_tokens=3)
    assert chain.source == COPY
    assert chain.tokens == [7, 8, 9]
    assert chain.copy_features.match_len == 2
    assert chain.copy_features.source_distance == 6


def test_no_proposal_below_the_minimum_match():
    index = CopyIndex(min_match=3)
    index.extend([1, 2, 3, 9, 2, 3])
    assert index.propose() is None


def test_longest_match_beats_a_more_recent_shorter_one():
    index = CopyIndex(min_match=2)
    # [1 2 3] -> 4 occurs first; [2 3] -> 7 occurs later; the suffix is [1 2 3].
    index.extend([1, 2, 3, 4, 0, 2, 3, 7, 0, 1, 2, 3])
    chain = index.propose()
    assert chain.tokens[0] == 4
    assert chain.copy_features.match_len == 3
    assert chain.copy_features.num_candidates == 2
    assert chain.copy_features.candidates_agree is False


def test_equal_matches_prefer_the_most_recent():
    index = CopyIndex(min_match=2)
    index.extend([1, 2, 3, 1, 2, 4, 1, 2])
    assert index.propose().tokens[0] == 4
    assert index.propose().copy_features.candidates_agree is False


def test_draft_stops_at_the_end_of_the_context_and_at_max_tokens():
    index = CopyIndex(min_match=1)
    index.extend([1, 2, 1])
    assert index.propose(max_tokens=15).tokens == [2, 1]
    assert index.propose(max_tokens=1).tokens == [2]
    assert index.propose(max_tokens=0) is None


def test_a_seeded_reference_wins_an_equal_match_and_is_never_copied_past_its_end():
    """The reference is the predicted answer: on an equal match it is copied from rather than the
    (more recent) original in the prompt, and a copy stops at its end, not in the prompt after it."""
    reference = [1, 2, 3, 60, 4, 5]  # 60: the new name
    index = CopyIndex(min_match=3)
    index.seed(reference)
    index.extend([7, 1, 2, 3, 50, 4, 5, 8, 9] + [1, 2, 3])  # the prompt (the original, 50), the answer so far
    chain = index.propose(15)
    assert chain.tokens == [60, 4, 5]  # not [50, 4, 5, 8, ...] from the prompt, not on into it
    assert chain.source_start == 3
    index.extend([60, 4, 5])  # the answer is the whole reference: nothing more is predicted
    assert index.propose(15) is None
    unseeded = CopyIndex(min_match=3)
    unseeded.extend(reference + [7, 1, 2, 3, 50, 4, 5, 8, 9] + [1, 2, 3])
    assert unseeded.propose(15).tokens[:2] == [50, 4]  # without a seed the most recent wins


def test_lengths_are_compared_over_the_answer_only():
    """The prompt's copy of the code and the answer both open with a fence, so the prompt matches
    the answer further back than the reference (which starts at the code) does: over the answer's
    own tokens they match alike, and the reference (the new name, 60) is copied."""
    fence, py, nl = 20, 21, 22
    reference = [1, 2, 3, 60, 4, 5]
    prompt = [30, nl, fence, py, nl, 1, 2, 3, 50, 4, 5, nl, fence, 31, 32, nl, fence, py, nl]
    index = CopyIndex(min_match=3)
    index.seed(reference)
    index.extend(prompt + [1, 2, 3])  # the answer so far: three tokens
    assert index.propose(15).tokens[:2] == [50, 4]  # by whole length, the prompt's copy
    assert index.propose(15, answer_tokens=3).tokens == [60, 4, 5]
    # An answer shorter than a match that begins like the reference goes on like it.
    start = CopyIndex(min_match=3)
    start.seed(reference)
    start.extend(prompt + [1])
    assert start.propose(15, answer_tokens=1).tokens == [2, 3, 60, 4, 5]
    assert start.propose(15).tokens[:3] == [2, 3, 50]


def test_a_resync_guess_in_the_reference_stops_at_its_end():
    from hsedit.drafting.copy_drafter import Alignment

    reference = [10, 11, 12, 13, 14, 15]
    index, alignment = CopyIndex(3), Alignment()
    index.seed(reference)
    index.extend([77, 78, 10, 11, 12])  # the prompt, then the answer so far
    at = _copy_step(index, alignment, [10, 11, 12, 90, 14, 15], 3, index.propose(15))  # 13 drafted, 90 emitted
    assert at == 4 and alignment.diverged_at == 3
    # 90 taken for an insertion: the reference from the token it displaced, to its end only
    assert alignment.resume(index, 15).tokens == [13, 14, 15]


def test_reset_forgets_everything():
    index = CopyIndex(min_match=1)
    index.extend([1, 2, 1])
    index.reset()
    assert len(index) == 0 and index.propose() is None


@settings(max_examples=300, deadline=None)
@given(tokens=token_lists, min_match=st.integers(1, 4), seed=st.integers(0, 1000))
def test_incremental_index_equals_a_full_rescan(tokens, min_match, seed):
    rng = random.Random(seed)
    index = CopyIndex(min_match)
    fed = 0
    while fed < len(tokens):  # feed in random chunks, checking after each
        step = rng.randint(1, 5)
        index.extend(tokens[fed : fed + step])
        fed = min(len(tokens), fed + step)
        assert index.longest_match() == longest_match_by_scan(tokens[:fed], min_match)


@settings(max_examples=300, deadline=None)
@given(tokens=token_lists, min_match=st.integers(1, 4), max_tokens=st.integers(1, 15))
def test_every_proposal_continues_an_earlier_occurrence_of_the_suffix(tokens, min_match, max_tokens):
    index = CopyIndex(min_match)
    index.extend(tokens)
    chain = index.propose(max_tokens)
    if chain is None:
        return
    features = chain.copy_features
    end = len(tokens) - 1
    source_end = end - features.source_distance
    length = features.match_len
    assert 0 <= source_end < end
    assert length >= min_match
    # The earlier passage ends with the current suffix ...
    assert tokens[source_end - length + 1 : source_end + 1] == tokens[end - length + 1 :]
    # ... and the draft is exactly what followed it.
    assert 1 <= len(chain.tokens) <= max_tokens
    assert chain.tokens == tokens[source_end + 1 : source_end + 1 + len(chain.tokens)]
    assert features.num_candidates >= 1


# -- resync after a change -------------------------------------------------------------------
def _copy_step(index, alignment, output, at, chain):
    """Verify `chain` greedily against `output` from position `at`; book it; return the new position."""
    kept = 0
    while chain is not None and kept < len(chain) and at + kept < len(output) and chain.tokens[kept] == output[at + kept]:
        kept += 1
    emitted = output[at : at + kept + 1]
    index.extend(emitted)
    alignment.observe(chain, kept, emitted, index.tokens)
    return at + len(emitted)


def test_after_an_insertion_the_copy_resumes_where_the_original_continues():
    from hsedit.drafting.copy_drafter import Alignment

    original = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    # `13` becomes `13 90 91` (attempt -> attempt_value): the original then goes on with 14.
    output = [10, 11, 12, 13, 90, 91, 14, 15, 16, 17, 18, 19]
    index, alignment = CopyIndex(3), Alignment()
    index.extend(original + [10, 11, 12])  # the prompt, then the answer so far
    at = _copy_step(index, alignment, output, 3, index.propose(15))  # keeps 13, then 90: diverged
    assert alignment.diverged_at is not None and index.propose(15) is None  # no 3-gram to match
    at = _copy_step(index, alignment, output, at, alignment.resume(index, 15))  # 14...: wrong, 91 comes
    chain = alignment.resume(index, 15)
    assert chain.tokens[:6] == [14, 15, 16, 17, 18, 19]  # resumed at once, not 3 tokens later
    assert chain.copy_features.match_len == 1 and not chain.copy_features.candidates_agree


def test_after_a_deletion_the_copy_resumes_after_the_last_new_token():
    from hsedit.drafting.copy_drafter import Alignment

    original = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    output = [10, 11, 12, 16, 17, 18, 19]  # 13 14 15 deleted
    index, alignment = CopyIndex(3), Alignment()
    index.extend(original + [10, 11, 12])
    at = _copy_step(index, alignment, output, 3, index.propose(15))  # 13 drafted, 16 emitted
    assert index.propose(15) is None
    assert alignment.resume(index, 15).tokens[:3] == [17, 18, 19]  # 16 is where the original is rejoined
    assert _copy_step(index, alignment, output, at, alignment.resume(index, 15)) == len(output)


def test_resync_only_with_a_price():
    """The copy drafter alone never guesses (a wrong guess is verified at full length); the
    hybrid prices the guess like any chain."""
    from pathlib import Path

    from hsedit.drafting.copy_acceptance import CopyAcceptanceModel
    from hsedit.drafting.planner import DraftPlanner, RowView

    original = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    model = CopyAcceptanceModel.load(Path(__file__).parent.parent / "hsedit" / "models" / "copy-acceptance.json")
    for planner, guesses in ((DraftPlanner(min_match=3), False), (DraftPlanner(min_match=3, copy_acceptance=model), True)):
        context = original + [10, 11, 12]
        (draft,) = planner.step([RowView("a", np.array(context), [12], 15)])
        assert draft[:2] == [13, 14]
        context += [13, 90]  # 13 kept, then a new token
        (draft,) = planner.step([RowView("a", np.array(context), [13, 90], 15)])
        assert (draft[:1] == [14]) is guesses


def longest_match_by_scan(tokens: list[int], min_match: int) -> tuple[int, int] | None:
    """The rule spelt out (quadratic): the same answer as CopyIndex.longest_match."""
    end = len(tokens) - 1
    best: tuple[int, int] | None = None
    for q in range(end):
        length = 0
        while length <= q and tokens[q - length] == tokens[end - length]:
            length += 1
        if length >= min_match and (best is None or (length, q) > (best[1], best[0])):
            best = (q, length)
    return best
