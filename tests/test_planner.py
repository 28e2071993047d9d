"""Per-request drafting state across engine steps, without an engine."""

import numpy as np
import pytest

from hsedit.drafting.chain import NGRAM, PROBE, TARGET
from hsedit.drafting.planner import DraftPlanner, RowView

PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3]


def row(req_id, context, sampled, max_draft=15):
    return RowView(req_id, np.array(context), sampled, max_draft)


def test_books_what_the_target_kept_of_last_steps_draft():
    planner = DraftPlanner(min_match=3)
    context = PROMPT + [4]
    (draft,) = planner.step([row("a", context, [4])])
    assert draft == [5, 6, 7, 8, 9, 1, 2, 3, 4]  # copied after the earlier "2 3 4"
    # The target keeps 5 6, then says 0 instead of 7.
    context += [5, 6, 0]
    planner.step([row("a", context, [5, 6, 0])])
    first, second = planner.take_records("a")
    assert (first.source, first.drafted, first.accepted, first.emitted) == (None, 0, 0, (4,))
    assert (second.source, second.drafted, second.accepted) == (NGRAM, 9, 2)
    assert second.token_sources() == [NGRAM, NGRAM, TARGET]
    assert second.copy_features.match_len == 4  # "1 2 3 4" matched; kept with the outcome
    assert planner.take_records("a") == []  # taken once


def test_state_follows_request_ids_not_rows():
    planner = DraftPlanner(min_match=3)
    planner.step([row("a", PROMPT + [4], [4]), row("b", [7, 7, 1], [1])])
    # Row 0 now holds a new request "c", row 1 still "b": "c" starts clean.
    drafts = planner.step([row("c", [9, 9, 9, 9], [9]), row("b", [7, 7, 1, 5], [5])])
    (record_c,) = planner.take_records("c")
    assert record_c.source is None
    assert drafts[0] == [9]  # "9 9 9" occurred before, followed by one more 9
    assert [r.emitted for r in planner.take_records("b")] == [(1,), (5,)]


def test_a_context_that_is_not_an_extension_rebuilds_the_index():
    planner = DraftPlanner(min_match=2)
    planner.step([row("a", [1, 2, 3, 1, 2], [2])])
    (draft,) = planner.step([row("a", [5, 6, 7, 5, 6], [6])])
    assert draft == [7, 5, 6]


def test_respects_each_rows_draft_limit_and_skips_prefill_chunks():
    planner = DraftPlanner(min_match=3)
    (draft,) = planner.step([row("a", PROMPT + [4], [4], max_draft=2)])
    assert draft == [5, 6]
    assert planner.step([row("a", PROMPT + [4], [])]) == [[]]
    assert len(planner.take_records("a")) == 1


def test_probe_drafts_a_fixed_number_of_filler_tokens():
    planner = DraftPlanner()
    planner.probe_length = 4
    (draft,) = planner.step([row("a", [1, 2, 3], [3])])
    assert draft == [3, 3, 3, 3]
    planner.step([row("a", [1, 2, 3, 3, 8], [3, 8])])
    assert planner.take_records("a")[-1].source == PROBE


def test_release_forgets_a_request():
    planner = DraftPlanner()
    planner.step([row("a", PROMPT + [4], [4])])
    planner.release("a")
    assert planner.take_records("a") == []


def test_unknown_drafter_is_refused():
    with pytest.raises(ValueError, match="magic"):
        DraftPlanner(drafters=("magic",))
