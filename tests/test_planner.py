"""Per-request drafting state across engine steps, without an engine."""

from pathlib import Path

import numpy as np
import pytest

from hsedit.drafting.chain import COPY, PROBE, TARGET
from hsedit.drafting.copy_drafter import RESYNC_MAX_NEW
from hsedit.drafting.planner import DraftPlanner, RowView, judged_positions

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
    assert (second.source, second.drafted, second.accepted) == (COPY, 9, 2)
    assert second.token_sources() == [COPY, COPY, TARGET]
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


def test_a_request_switches_between_chains_without_losing_its_context_features():
    """While the copy chain is confident the DSpark pass is skipped, yet the drafter's context
    keeps up, so the first pass after the copy chain breaks drafts as if it had never stopped."""
    import torch

    from hsedit.drafting.copy_acceptance import CopyAcceptanceModel
    from hsedit.drafting.hybrid import HybridSelector
    from hsedit.drafting.model_drafter import FeatureRows, ModelDrafter
    from hsedit.drafting.planner import DSPARK
    from tests.test_dspark import random_drafter

    copy_acceptance = CopyAcceptanceModel.load(Path(__file__).parent.parent / "hsedit" / "models" / "copy-acceptance.json")
    selector = HybridSelector(max_batch_tokens=256)
    # The passes' wall time must not decide this test: on a loaded machine a pass of even this
    # tiny drafter can take many times its profile, and the running ratio of seen to profiled
    # time (tested in test_hybrid) would then price it out. The profile below is what counts.
    selector.record_draft_time = lambda count, seconds: None
    selector.set_costs([1, 16, 64], [0.300, 0.340, 0.500])
    planner = DraftPlanner((COPY, DSPARK), model_drafter=ModelDrafter(random_drafter()), copy_acceptance=copy_acceptance,
                           selector=selector)
    selector.set_draft_costs([1, 4], [0.010, 0.016])
    size = planner.model_drafter.model.config.feature_size
    repeated = [5, 6, 7, 8, 9, 10, 11, 12] * 4  # copied text: the copy chain is confident
    # Never seen, and longer than a change the copy drafter resyncs after: no copy chain.
    fresh = list(range(20, 20 + RESYNC_MAX_NEW + 4))
    features = torch.randn(128, size, generator=torch.Generator().manual_seed(0))  # [position, feature]
    sequence = [1, 2, 3, *repeated, *fresh]
    # The target's greedy output is `sequence`: it keeps each draft token that equals the next one.
    n, start, emitted = 4, 0, [sequence[3]]  # the prefill computes features from position 0
    ran_while_copying, ran = [], []
    while True:
        context = sequence[:n]
        rows = FeatureRows(features[start : n - 1], start, n)
        before = planner.model_drafted
        (draft,) = planner.step([RowView("a", np.array(context), emitted, 15, rows)])
        (ran_while_copying if n <= 3 + len(repeated) else ran).append(planner.model_drafted > before)
        if n == len(sequence):
            break
        accepted = 0
        while accepted < len(draft) and n + accepted < len(sequence) and draft[accepted] == sequence[n + accepted]:
            accepted += 1
        emitted = sequence[n : n + min(accepted + 1, len(sequence) - n)]
        start, n = n - 1, n + len(emitted)
    assert not all(ran_while_copying), "the pass was never skipped while copying"
    # (This random drafter's chains are judged wrong, so it is retried now and then, not every step.)
    assert any(ran), "the pass did not come back when the copy chain broke"
    # The drafter's context is every position before the anchor, as one pass over them gives.
    reference = ModelDrafter(planner.model_drafter.model)
    reference.observe([("b", FeatureRows(features[: len(context) - 1], 0, len(context)))])
    mine = planner.model_drafter.propose([("a", context[-1], 7)])["a"]
    theirs = reference.propose([("b", context[-1], 7)])["b"]
    assert mine.tokens == theirs.tokens
    assert np.allclose(mine.survival, theirs.survival, atol=1e-5)


def test_judged_positions_stop_where_the_chain_and_the_target_part():
    assert judged_positions([5, 6, 7], [5, 6, 9, 1]).tolist() == [1, 1, 0]
    assert judged_positions([5, 6, 7], [5, 6, 7, 1]).tolist() == [1, 1, 1]
    assert judged_positions([5, 6, 7], [5]).tolist() == [1]  # the rest is not judged
    assert judged_positions([5, 6, 7], [4, 6]).tolist() == [0]


def test_dspark_estimates_follow_what_the_target_keeps_of_every_chain():
    """A request whose DSpark chains the target keeps comes to trust them more than the drafter's
    own confidences say, one whose chains it never keeps less; new requests start from what
    finished ones learnt."""
    import torch

    from hsedit.drafting.model_drafter import FeatureRows, ModelDrafter
    from hsedit.drafting.planner import DSPARK
    from tests.test_dspark import random_drafter

    planner = DraftPlanner((DSPARK,), model_drafter=ModelDrafter(random_drafter()))
    size = planner.model_drafter.model.config.feature_size
    features = torch.randn(256, size, generator=torch.Generator().manual_seed(0))
    raw, shifted = {}, {}
    for req_id, keeps in (("kept", True), ("rejected", False)):
        context, start, emitted = [1, 2, 3, 4], 0, [4]
        for _ in range(6):
            rows = FeatureRows(features[start : len(context) - 1], start, len(context))
            (draft,) = planner.step([RowView(req_id, np.array(context), emitted, 7, rows)])
            chain = planner._states[req_id].model_proposed
            raw[req_id] = 1 / (1 + np.exp(-chain[1]))
            shifted[req_id] = planner._model_estimate(planner._states[req_id])[: len(draft)]
            # the target keeps the whole chain, or none of it (its own token differs from the first)
            emitted = [*draft, 7] if keeps else [(draft[0] + 1) % 90]
            start, context = len(context) - 1, context + emitted
    assert planner._states["kept"].model_offset.value > 0
    assert planner._states["rejected"].model_offset.value < 0
    assert shifted["kept"][-1] > np.cumprod(raw["kept"])[-1]
    assert shifted["rejected"][0] < raw["rejected"][0]
    learnt = planner._states["rejected"].model_offset.value
    planner.release("rejected")
    planner.step([RowView("new", np.array([1, 2, 3]), [3], 7, FeatureRows(features[:2], 0, 3))])
    assert planner._states["new"].model_offset.prior == pytest.approx(0.2 * learnt)


def test_new_requests_start_from_what_finished_requests_learnt_about_copies():
    from hsedit.drafting.copy_acceptance import CopyAcceptanceModel

    copy_acceptance = CopyAcceptanceModel.load(Path(__file__).parent.parent / "hsedit" / "models" / "copy-acceptance.json")
    planner = DraftPlanner(copy_acceptance=copy_acceptance)
    text = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 12
    context = text[:12]
    (draft,) = planner.step([row("a", context, [context[-1]])])
    for _ in range(4):  # every copied token is kept: the request learns to trust its copies
        kept = draft + [text[len(context) + len(draft)]]
        context = context + kept
        (draft,) = planner.step([row("a", context, kept)])
    learnt = planner._states["a"].copy_offset.value
    assert learnt > 0
    planner.release("a")
    planner.step([row("b", [5, 5, 5], [5])])
    assert planner._states["b"].copy_offset.value == pytest.approx(0.2 * learnt)


def test_a_request_with_a_reference_starts_from_the_fitted_shift_and_learns_apart():
    """An edit (its file as the predicted output) trusts its copies from the first step, and what
    finished edits learnt moves only the next edit's start, never a chat request's."""
    from dataclasses import replace

    from hsedit.drafting.copy_acceptance import CopyAcceptanceModel

    shipped = CopyAcceptanceModel.load(Path(__file__).parent.parent / "hsedit" / "models" / "copy-acceptance.json")
    planner = DraftPlanner(copy_acceptance=replace(shipped, reference_offset=2.0), max_draft=31)
    text = list(range(1, 41))
    planner.seed_prediction("edit", text)
    (edited,) = planner.step([row("edit", text[:6], [text[5]], 31)])
    (chat,) = planner.step([row("chat", text + text[:6], [text[5]], 31)])  # the same copy, no reference
    edit_state, chat_state = planner._states["edit"], planner._states["chat"]
    assert edit_state.copy_offset.value == pytest.approx(2.0) and chat_state.copy_offset.value == 0.0
    assert edit_state.pending.survival[5] > chat_state.pending.survival[5]
    # The edit's copy is rejected at its first token: its shift falls, but less than the prior's
    # evidence (one miss is an edit's change point).
    emitted = [99]
    (_,) = planner.step([row("edit", text[:6] + emitted, emitted, 31)])
    assert 0.5 < planner._states["edit"].copy_offset.value < 2.0
    learnt = planner._states["edit"].copy_offset.value
    planner.release("edit")
    planner.seed_prediction("next edit", text)
    assert planner._states["next edit"].copy_offset.value == pytest.approx(0.8 * 2.0 + 0.2 * learnt)
    planner.step([row("next chat", [5, 5, 5], [5])])
    assert planner._states["next chat"].copy_offset.value == 0.0


def test_copy_chains_of_a_request_with_nothing_predicted_stop_at_the_unpriced_length():
    from hsedit.drafting.planner import UNPREDICTED_MAX_COPY

    repeated = list(range(100, 160))  # 60 tokens the answer repeats
    context = repeated + repeated[:3]
    chat = DraftPlanner(min_match=3, max_draft=31)
    (draft,) = chat.step([row("chat", context, [context[-1]], max_draft=31)])
    assert draft == repeated[3:3 + UNPREDICTED_MAX_COPY]
    edit = DraftPlanner(min_match=3, max_draft=31)
    edit.seed_prediction("edit", repeated)
    (draft,) = edit.step([row("edit", repeated[:3], [repeated[2]], max_draft=31)])
    assert draft == repeated[3:34]  # what is predicted is copied as far as the engine verifies


def test_a_seeded_prediction_is_copied_from_and_survives_a_rebuild():
    planner = DraftPlanner(min_match=3)
    planner.seed_prediction("a", [40, 41, 42, 43, 44, 45])  # the predicted answer, not in the context
    (draft,) = planner.step([row("a", [1, 2, 40, 41, 42], [42])])
    assert draft == [43, 44, 45]  # from the prediction, to its end (the context after it is no answer)
    # A context that is not an extension rebuilds the index: the prediction stays in it.
    (draft,) = planner.step([row("a", [9, 41, 42, 43], [43])])
    assert draft[:2] == [44, 45]
    (plain,) = DraftPlanner(min_match=3).step([row("b", [1, 2, 40, 41, 42], [42])])
    assert plain == []  # without the prediction there is nothing to copy


def test_an_edit_copies_its_prediction_from_the_first_step():
    """The prompt holds the original in a fenced block and ends with the answer's own fence: the
    first draft comes from the prediction (the new name), not from the prompt's longer match."""
    fence, py, nl = 20, 21, 22
    prompt = [30, nl, fence, py, nl, 1, 2, 3, 50, 4, 5, nl, fence, 31, 32, nl, fence, py, nl]
    planner = DraftPlanner(min_match=3)
    planner.seed_prediction("a", [1, 2, 3, 60, 4, 5, nl, fence])
    (draft,) = planner.step([row("a", prompt + [1], [1])])
    assert draft == [2, 3, 60, 4, 5, nl, fence]


def test_failed_resync_guesses_are_learnt_apart_from_the_copies():
    """Chat that repeats itself: its copies are kept, its resync guesses after each change are
    not. The request learns to distrust the guesses without distrusting its copies (one shared
    shift once cut the copies short as well)."""
    from hsedit.drafting.copy_acceptance import CopyAcceptanceModel

    copy_acceptance = CopyAcceptanceModel.load(Path(__file__).parent.parent / "hsedit" / "models" / "copy-acceptance.json")
    planner = DraftPlanner(copy_acceptance=copy_acceptance, max_draft=31)
    text = list(range(1, 11)) * 3  # said three times
    context = text[:14]
    (draft,) = planner.step([row("a", context, [context[-1]], 31)])
    guesses = 0
    fresh = iter(range(100, 200))
    for _ in range(12):
        state = planner._states["a"]
        if state.pending is not None and state.pending.copy_features.resumed:
            guesses += 1
            emitted = [next(fresh)]  # the guess is wrong at its first token
        elif draft:
            emitted = draft + [next(fresh)]  # the copy is kept whole, then the answer moves on
        else:
            emitted = [next(fresh)]
        context = context + emitted
        (draft,) = planner.step([row("a", context, emitted, 31)])
    state = planner._states["a"]
    assert guesses >= 3, "no resync guesses were made: nothing was tested"
    assert state.resume_offset.value < -0.5
    assert state.copy_offset.value >= 0.0


def _hybrid_planner(step_costs: tuple[list[int], list[float]], max_draft: int = 15):
    from hsedit.drafting.copy_acceptance import CopyAcceptanceModel
    from hsedit.drafting.hybrid import HybridSelector

    copy_acceptance = CopyAcceptanceModel.load(Path(__file__).parent.parent / "hsedit" / "models" / "copy-acceptance.json")
    selector = HybridSelector(max_batch_tokens=256)
    selector.set_costs(*step_costs)
    return DraftPlanner(copy_acceptance=copy_acceptance, selector=selector, max_draft=max_draft)


def test_a_copy_chain_the_price_turned_down_is_judged_all_the_same():
    """At temperature 0 the target's next tokens judge any chain proposed, verified or not: a
    request whose copies are priced out still learns how they would have fared, so a distrust
    (its own or one learnt from finished requests) cannot keep it from the evidence."""
    planner = _hybrid_planner(([1, 2, 64], [0.030, 3.0, 100.0]))  # a draft slot costs 100 steps
    text = list(range(1, 11)) * 4
    context = text[:13]
    (draft,) = planner.step([row("a", context, [context[-1]])])
    assert draft == [], "the price should turn every copy down"
    for _ in range(3):  # the answer does repeat itself: every copy would have been kept
        emitted = [text[len(context)]]
        context = context + emitted
        (draft,) = planner.step([row("a", context, emitted)])
        assert draft == []
    offset = planner._states["a"].copy_offset
    assert offset.observed >= 3 and offset.value > 0


def test_resync_guesses_start_from_what_recent_guesses_of_their_kind_showed():
    """Chat's resync guesses are rarely kept: a new request without a reference starts from the
    distrust the recent guesses of such requests showed; one with a reference (an edit) does not."""
    planner = _hybrid_planner(([1, 2, 64], [0.030, 0.031, 0.060]))
    text = list(range(1, 11)) * 3
    context = text[:14]
    planner.step([row("chat", context, [context[-1]])])
    fresh = iter(range(100, 200))
    for _ in range(12):
        state = planner._states["chat"]
        pending = state.pending
        if pending is not None and not pending.copy_features.resumed:
            emitted = pending.tokens + [next(fresh)]  # copies kept, then the answer moves on
        else:
            emitted = [next(fresh)]  # every guess wrong
        context = context + emitted
        planner.step([row("chat", context, emitted)])
    learnt = planner._states["chat"].resume_offset.value
    assert learnt < -0.5
    planner.release("chat")
    planner.step([row("next chat", [5, 5, 5], [5])])
    assert planner._states["next chat"].resume_offset.prior == pytest.approx(planner._resume_pool[False].value)
    assert planner._resume_pool[False].value < -0.5
    planner.seed_prediction("edit", text)
    assert planner._states["edit"].resume_offset.prior == 0.0


def _dspark_passes(keeps: bool, steps: int = 80, pass_seconds: float = 0.001, prompt_tokens: int = 3,
                   row_seconds: float | None = None, **drafter) -> int:
    """DSpark passes a hybrid planner runs for one request over `steps` steps of text it cannot
    copy (after a prompt of `prompt_tokens`), when the target keeps every DSpark chain (`keeps`)
    or none; `row_seconds`: the drafter's profiled cost of projecting a feature row."""
    import torch

    from hsedit.drafting.copy_acceptance import CopyAcceptanceModel
    from hsedit.drafting.hybrid import HybridSelector
    from hsedit.drafting.model_drafter import FeatureRows, ModelDrafter
    from hsedit.drafting.planner import DSPARK
    from tests.test_dspark import random_drafter

    copy_acceptance = CopyAcceptanceModel.load(Path(__file__).parent.parent / "hsedit" / "models" / "copy-acceptance.json")
    selector = HybridSelector(max_batch_tokens=256)
    selector.record_draft_time = lambda count, seconds: None  # the profile decides, not this machine's load
    selector.set_costs([1, 16, 64], [0.030, 0.034, 0.050])
    selector.set_draft_costs([1, 4], [pass_seconds, 1.6 * pass_seconds])
    planner = DraftPlanner((COPY, DSPARK), model_drafter=ModelDrafter(random_drafter(**drafter)), copy_acceptance=copy_acceptance,
                           selector=selector)
    planner.model_drafter.row_seconds = row_seconds
    size = planner.model_drafter.model.config.feature_size
    features = torch.randn(prompt_tokens + 4 * steps + 8, size, generator=torch.Generator().manual_seed(0))
    vocab = planner.model_drafter.model.config.vocab_size
    rng = np.random.default_rng(0)
    # Random tokens, each unlike the drafter's guess: a repeated three-token run (the copy
    # drafter's key) is rare among a few hundred, so there is next to nothing to copy.
    fresh = (int(t) for t in rng.integers(0, vocab, size=prompt_tokens + 10 * steps))
    context = [next(fresh) for _ in range(prompt_tokens)]
    start, emitted = 0, context[-1:]
    for _ in range(steps):
        rows = FeatureRows(features[start : len(context) - 1], start, len(context))
        (draft,) = planner.step([RowView("a", np.array(context), emitted, 7, rows)])
        ran = planner._states["a"].model_proposed is not None
        emitted = ([*draft, next(fresh)] if keeps and ran and draft else [next(fresh)])
        start, context = len(context) - 1, context + emitted
    return planner.model_drafted


def test_dspark_backs_off_where_the_target_keeps_nothing_and_not_where_it_keeps_its_chains(monkeypatch):
    """Chat for a drafter of code: every DSpark chain rejected. The request retries it ever more
    rarely (a pass each time, for nothing) instead of every few steps; where the chains are kept
    the drafter keeps running."""
    import hsedit.drafting.planner as planner_module

    rejected = _dspark_passes(keeps=False)
    kept = _dspark_passes(keeps=True)
    monkeypatch.setattr(planner_module, "MAX_MODEL_WAIT", 0)  # no back-off: the drift alone
    rejected_without = _dspark_passes(keeps=False)
    # (The first ~15 passes are the request's offset learning that its chains fail.)
    assert rejected <= 20, rejected
    assert rejected_without >= 2 * rejected, (rejected, rejected_without)
    assert kept >= 2 * rejected, (kept, rejected)


def test_a_new_request_is_probed_only_after_the_back_off():
    """A pass dearer than anything its chains could earn (its trainer's estimate known from the
    start) is never planned, only probed: not in a request's first PROBE_EVERY steps, and ever
    more rarely after each chain the target rejects."""
    from hsedit.drafting.planner import PROBE_EVERY

    known = {"expected_survival": (0.4, 0.2, 0.1)}
    assert _dspark_passes(keeps=False, steps=PROBE_EVERY, pass_seconds=0.5, **known) == 0
    assert 1 <= _dspark_passes(keeps=False, steps=80, pass_seconds=0.5, **known) <= 4


def test_a_request_is_probed_only_where_its_waiting_features_cost_no_more_than_a_pass():
    """A probe projects every feature row the request has waiting before it drafts. With a
    prompt whose rows would take twice a pass to project, the request is not probed in the
    steps the back-off alone would allow; once PROJECT_EVERY rows have gathered and been
    projected it is, so no request is locked out for good."""
    from hsedit.drafting.model_drafter import PROJECT_EVERY
    from hsedit.drafting.planner import PROBE_EVERY

    known = {"expected_survival": (0.4, 0.2, 0.1)}
    pass_seconds = 0.5
    prompt_tokens = PROJECT_EVERY - 32
    row_seconds = 2 * pass_seconds / prompt_tokens  # the prompt's rows cost two passes
    steps_before_projection = 28  # a row a step until PROJECT_EVERY rows have gathered (~32 steps)
    long = dict(keeps=False, pass_seconds=pass_seconds, prompt_tokens=prompt_tokens,
                row_seconds=row_seconds, **known)
    # The back-off alone would probe it within those steps.
    assert _dspark_passes(steps=steps_before_projection, keeps=False, pass_seconds=pass_seconds,
                          prompt_tokens=prompt_tokens, **known) >= 1
    assert _dspark_passes(steps=steps_before_projection, **long) == 0
    assert _dspark_passes(steps=steps_before_projection + 2 * PROBE_EVERY, **long) >= 1


def test_a_priced_chain_runs_to_the_longest_alone_and_to_the_batched_length_beside_others():
    """The hybrid's copy chains: up to the engine's longest (63) for a request alone in the batch,
    up to BATCHED_MAX_DRAFT beside another request, whose step the table prices worst."""
    from hsedit.drafting.copy_acceptance import CopyAcceptanceModel
    from hsedit.drafting.copy_drafter import BATCHED_MAX_DRAFT, PRICED_MAX_DRAFT
    from hsedit.drafting.hybrid import HybridSelector

    copy_acceptance = CopyAcceptanceModel.load(Path(__file__).parent.parent / "hsedit" / "models" / "copy-acceptance.json")
    planner = DraftPlanner(copy_acceptance=copy_acceptance, selector=HybridSelector(), max_draft=PRICED_MAX_DRAFT)
    answer = list(range(100, 300))  # the predicted answer, copied from its start
    for name in ("a", "b"):
        planner.seed_prediction(name, answer)
    (alone,) = planner.step([row("a", answer[:5], [answer[4]], PRICED_MAX_DRAFT)])
    assert alone == answer[5 : 5 + PRICED_MAX_DRAFT]
    both = planner.step([row("a", answer[:6], [answer[5]], PRICED_MAX_DRAFT),
                         row("b", answer[:5], [answer[4]], PRICED_MAX_DRAFT)])
    assert both == [answer[6 : 6 + BATCHED_MAX_DRAFT], answer[5 : 5 + BATCHED_MAX_DRAFT]]


def test_a_cost_probe_drafts_its_full_length_beside_others():
    """The cost profile times n requests verifying k fillers each and keys the step n * (1 + k):
    the hybrid's cap beside others must not cut a probe, or a 4 x 63 step is timed at 4 x 31."""
    from hsedit.drafting.copy_acceptance import CopyAcceptanceModel
    from hsedit.drafting.copy_drafter import BATCHED_MAX_DRAFT, PRICED_MAX_DRAFT
    from hsedit.drafting.hybrid import HybridSelector

    copy_acceptance = CopyAcceptanceModel.load(Path(__file__).parent.parent / "hsedit" / "models" / "copy-acceptance.json")
    planner = DraftPlanner(copy_acceptance=copy_acceptance, selector=HybridSelector(), max_draft=PRICED_MAX_DRAFT)
    planner.probe_length = PRICED_MAX_DRAFT
    drafts = planner.step([row(name, [1, 2, 3], [3], PRICED_MAX_DRAFT) for name in "abcd"])
    assert [len(d) for d in drafts] == [PRICED_MAX_DRAFT] * 4 and PRICED_MAX_DRAFT > BATCHED_MAX_DRAFT
