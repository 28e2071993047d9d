"""The real vLLM engine with the real default model: exactness, streaming, accounting."""

from dataclasses import replace

import pytest

from hsedit.drafting.chain import COPY, TARGET
from hsedit.engine.engine import GenerationRequest
from tests.conftest import requests_for

pytestmark = pytest.mark.engine



def test_copy_drafting_is_token_identical_to_plain_decoding(plain_engine, copy_engine, prompts):
    plain = [plain_engine.generate([r])[0] for r in requests_for(prompts)]
    spec = [copy_engine.generate([r])[0] for r in requests_for(prompts)]
    for name, p, s in zip(prompts, plain, spec):
        assert s.token_ids == p.token_ids, f"spec output differs from plain on {name!r}"
        assert s.text == p.text
    accepted = {name: s.stats.accepted[COPY] for name, s in zip(prompts, spec)}
    # The comparison means something only if drafts were really accepted on copy-heavy prompts.
    assert accepted["copy-heavy edit"] > 20 and accepted["repeat code"] > 20, accepted
    assert spec[0].stats.tokens_per_step > 1.2


def test_concurrent_requests_keep_their_own_drafting_state(plain_engine, copy_engine, prompts):
    # All four at once share batch rows; each must still equal its plain output in the same
    # batch (fp32 CPU kernels are not batch-invariant: plain decoding alone may differ).
    together = copy_engine.generate(requests_for(prompts, max_tokens=96))
    plain = plain_engine.generate(requests_for(prompts, max_tokens=96))
    for name, t, p in zip(prompts, together, plain):
        assert t.token_ids == p.token_ids, f"batched spec output differs on {name!r}"


def test_every_step_is_accounted_for(copy_engine, prompts):
    request = GenerationRequest(prompts["copy-heavy edit"], max_tokens=200)  # its answer runs past 200 tokens
    events = list(copy_engine.stream([request]))
    stats = events[-1].stats
    assert events[-1].finished and sum(e.finished for e in events) == 1
    assert len(stats.steps) == len(events) > 1  # streamed step by step
    emitted = [len(e.token_ids) for e in events]
    assert sum(emitted) == stats.completion_tokens == 200
    for event, step in zip(events, stats.steps):
        assert step.emitted == tuple(event.token_ids) and len(event.sources) == len(step.emitted) >= 1
        assert 0 <= step.accepted <= step.matched <= step.drafted
        assert event.sources.count(COPY) == step.accepted
        assert all(s == TARGET for s in event.sources[step.accepted :])
    assert stats.accepted_prediction_tokens + stats.tokens_by_source()[TARGET] == 200
    assert stats.accepted_prediction_tokens + stats.rejected_prediction_tokens == sum(stats.drafted.values())
    # vLLM's scheduler counts the same acceptances independently.
    reported_drafted, reported_accepted = stats.engine_reported
    assert reported_accepted == sum(step.matched for step in stats.steps)
    assert reported_drafted <= sum(stats.drafted.values())
    # The streamed text pieces add up to the decoded output.
    text = "".join(piece for e in events for piece, _ in e.pieces)
    assert text == copy_engine.tokenizer.decode([t for e in events for t in e.token_ids], skip_special_tokens=True)


def test_leaving_a_stream_early_aborts_its_requests(copy_engine, prompts):
    stream = copy_engine.stream([GenerationRequest(prompts["chat"], max_tokens=500)])
    for _, _event in zip(range(3), stream):
        pass
    stream.close()
    assert not copy_engine.core.has_unfinished_requests()
    (again,) = copy_engine.generate([GenerationRequest(prompts["chat"], max_tokens=8)])
    assert again.stats.completion_tokens == 8


def test_cost_table_was_profiled_at_the_shapes_the_drafter_verifies(copy_engine):
    """The copy drafter verifies up to 15 drafts: 1, 4 and 16 requests, 0 to 15 drafts each
    (monotone by construction: `CostTable.from_samples`, tested in test_costs.py)."""
    from hsedit.engine.costs import PROFILE_SHAPES

    table = copy_engine.cost_table
    expected = {n * (1 + k) for n, k in PROFILE_SHAPES if k <= copy_engine.options.max_draft}
    # (A shape can go unmeasured only if the target accepted all its filler at once.)
    assert set(table.tokens) <= expected and {1, 256} <= set(table.tokens)
    assert 0 < table.step_time(1) < 5 and table.step_time(256) > table.step_time(1)


def test_a_repeated_prompt_is_counted_as_served_by_the_prefix_cache(plain_engine, prompts):
    # The bench's "of machine" counts only the tokens the target ran; a cached prefix is not one.
    request = GenerationRequest(prompts["copy-heavy edit"], max_tokens=4)
    (first,) = plain_engine.generate([request])
    (again,) = plain_engine.generate([request])
    assert first.stats.cached_prompt_tokens < first.stats.prompt_tokens
    assert 0 < again.stats.cached_prompt_tokens < again.stats.prompt_tokens
    assert again.stats.cached_prompt_tokens >= first.stats.prompt_tokens // 2


def test_an_edit_answer_caught_in_a_loop_stops_there_and_is_otherwise_the_same(copy_engine):
    """A held-out region the model answers by repeating a doctest's output block until its budget:
    asked as `hsedit apply` asks it, the answer stops at the loop (finish reason "repetition"),
    and up to there it is token for token the answer that runs on."""
    import json
    from pathlib import Path

    from hsedit.apply import EditJob, edit_request
    from hsedit.edit.files import SourceFile
    from hsedit.edit.regions import group, units
    from hsedit.engine.repetition import REPETITION, ends_in_loop
    from hsedit.train.finetune.dataset import HELDOUT_RENAMES

    lines = Path(HELDOUT_RENAMES["large"]).read_text().splitlines()
    example = next(json.loads(line) for line in lines if '"mpmath/matrices/calculus.py"' in line)
    text = example["before"]
    # expm's header with its 60-line docstring, as one region (what a rename sent before a long
    # docstring was cut from its header; a free-form edit of expm still sends it so).
    cut = units(text)
    header = next(u for u in cut if u.start == 52)
    docstring = cut[cut.index(header) + 1]
    assert docstring.docstring
    (region,) = group(text, [header, docstring])
    job = EditJob.for_source(SourceFile.from_text(Path(example["path"]), region.shown), example["path"],
                             example["instruction"])
    request = edit_request(copy_engine, job)
    assert request.stop_repeating
    (stopped,) = copy_engine.generate([request])
    (ran_on,) = copy_engine.generate([replace(request, stop_repeating=False)])
    assert stopped.stats.finish_reason == REPETITION and ran_on.stats.finish_reason == "length"
    assert stopped.stats.completion_tokens < ran_on.stats.completion_tokens == request.max_tokens
    assert stopped.token_ids == ran_on.token_ids[: len(stopped.token_ids)]
    assert ends_in_loop(stopped.text, job.source.text)
