"""hsedit's drafters where vLLM builds them in another process: the options travel in vLLM's
own config (`additional_config["hsedit"]`), predictions in the request's sampling parameters,
and the engine reaches the proposer only through vLLM's `collective_rpc`.

Outputs are compared with plain decoding in the same process mode and at the same batch
(fp32 CPU kernels are not batch-invariant)."""

import pytest

from hsedit.drafting.chain import HYBRID, TARGET
from hsedit.engine.engine import Engine, EngineOptions, GenerationRequest
from hsedit.engine.vllm_proposer import RemoteProposer
from hsedit.errors import ModelError
from tests.conftest import requests_for

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def worker_engines():
    """Plain and hybrid, each with vLLM's engine core (and the model runner) in its own process."""
    plain = Engine(EngineOptions(drafter="none", multiprocessing=True, dtype="float32"))
    hybrid = Engine(EngineOptions(drafter="hybrid", multiprocessing=True, dtype="float32"))
    yield plain, hybrid
    plain.close()
    hybrid.close()


def test_the_hybrid_in_a_worker_process_is_token_identical_to_plain(worker_engines, prompts):
    plain, hybrid = worker_engines
    assert isinstance(hybrid.proposer, RemoteProposer)  # nothing of it lives in this process
    before = hybrid.proposer.timings()
    alone = [(plain.generate([r])[0], hybrid.generate([r])[0]) for r in requests_for(prompts)]
    for name, (p, h) in zip(prompts, alone):
        assert h.token_ids == p.token_ids, f"hybrid in a worker differs from plain on {name!r}"
    together_plain = plain.generate(requests_for(prompts, max_tokens=96))
    together_hybrid = hybrid.generate(requests_for(prompts, max_tokens=96))
    for name, p, h in zip(prompts, together_plain, together_hybrid):
        assert h.token_ids == p.token_ids, f"batched hybrid in a worker differs from plain on {name!r}"
    # It really drafted there: vLLM's per-request counts and the worker's own timings say so.
    edit = alone[0][1].stats
    drafted, accepted = edit.engine_reported
    assert accepted > 40 and drafted >= accepted, edit.engine_reported
    assert hybrid.proposer.timings().calls > before.calls
    # What the stats can say from here: accepted draft tokens, not which drafter wrote them.
    sources = {s.source for s in edit.steps if s.source}
    assert sources == {HYBRID}
    assert sum(s.accepted for s in edit.steps) + edit.tokens_by_source()[TARGET] == edit.completion_tokens


def test_a_prediction_reaches_the_worker_in_the_requests_sampling_parameters(worker_engines, prompts):
    """A chat answer is not in its prompt; handed over as a prediction, it is copied from the
    first step on, by a proposer in another process."""
    plain, hybrid = worker_engines
    request = GenerationRequest(prompts["chat"], max_tokens=120)
    answer = plain.generate([request])[0]
    without = hybrid.generate([request])[0]
    predicted = hybrid.generate([GenerationRequest(prompts["chat"], max_tokens=120, prediction=answer.text)])[0]
    assert predicted.token_ids == without.token_ids == answer.token_ids
    accepted_without, accepted_with = without.stats.engine_reported[1], predicted.stats.engine_reported[1]
    assert accepted_with >= 0.8 * len(answer.token_ids) > accepted_without, (accepted_with, accepted_without)


def test_pipeline_parallel_drafting_is_refused_with_vllms_reason():
    with pytest.raises(ModelError, match="pipeline parallelism.*last stage only"):
        Engine(EngineOptions(drafter="hybrid", pipeline_parallel_size=2))
