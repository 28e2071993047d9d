"""The server's pure parts: OpenAI request parsing and usage, the /v1/apply wire format read
back by the client, exposure rules, metrics text, the `server` setting."""

import pytest

from hsedit.config import load_config
from hsedit.drafting.chain import DSPARK, COPY, StepRecord
from hsedit.engine.requests import StepEvent
from hsedit.engine.stats import RequestStats
from hsedit.errors import (
    ContextTooLongError,
    OutputTruncatedError,
    ServerError,
    UsageError,
    error_for_exit_code,
)
from hsedit.server import openai_api, wire
from hsedit.server.main import check_exposure, is_loopback
from hsedit.server.metrics import Metrics

CHAT = {"model": "embedded", "messages": [{"role": "user", "content": "Hi"}]}


def parse(body, limit=512):
    return openai_api.parse_chat_request(body, served_model="embedded", max_tokens_limit=limit)


def test_a_chat_request_becomes_a_greedy_generation_with_its_prediction():
    chat = parse({**CHAT, "messages": [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                                       {"role": "user", "content": "Hi"}],
                  "max_completion_tokens": 40, "stop": "END", "stream": True,
                  "stream_options": {"include_usage": True},
                  "prediction": {"type": "content", "content": [{"type": "text", "text": "x = 1"}]}})
    assert chat.messages[0] == {"role": "system", "content": "Be brief."}
    assert chat.generation.max_tokens == 40 and chat.generation.temperature == 0.0
    assert chat.generation.stop == ["END"] and chat.generation.prediction == "x = 1"
    assert chat.stream and chat.include_usage and chat.has_prediction
    assert parse(CHAT).generation.max_tokens == 512  # no max_tokens: as much as the server allows


@pytest.mark.parametrize("body", [
    [], {"messages": []}, {"messages": [{"role": "robot", "content": "x"}]},
    {**CHAT, "n": 2}, {**CHAT, "max_tokens": 0}, {**CHAT, "max_tokens": 513}, {**CHAT, "max_tokens": True},
    {**CHAT, "temperature": 3}, {**CHAT, "stop": [""]}, {**CHAT, "prediction": {"type": "image"}},
    {**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
])
def test_bad_chat_requests_are_refused_with_a_reason(body):
    with pytest.raises(openai_api.BadRequest):
        parse(body)


def test_a_text_completion_request_shares_the_chat_checks_and_has_its_own_shape():
    text = openai_api.parse_completion_request(
        {"model": "embedded", "prompt": ["def f():"], "max_tokens": 30, "stream": True},
        served_model="embedded", max_tokens_limit=512,
    )
    assert text.kind == openai_api.TEXT and text.text_prompt == "def f():" and text.messages is None
    assert text.generation.max_tokens == 30 and text.stream
    for bad in ({"prompt": ""}, {"prompt": ["a", "b"]}, {"prompt": "x", "max_tokens": 513}, {"prompt": "x", "temperature": 3}):
        with pytest.raises(openai_api.BadRequest):
            openai_api.parse_completion_request(bad, served_model="embedded", max_tokens_limit=512)
    stats = stats_with(StepRecord(None, 0, 0, (5,)))
    body = openai_api.completion("cmpl-1", "embedded", "pass", stats, False, openai_api.TEXT)
    assert body["object"] == "text_completion" and body["choices"][0]["text"] == "pass"
    assert "message" not in body["choices"][0]
    piece = openai_api.chunk("cmpl-1", "embedded", {"content": "pa"}, kind=openai_api.TEXT)
    assert piece["object"] == "text_completion" and piece["choices"][0]["text"] == "pa"


@pytest.mark.parametrize("field", [{"temperature": False}, {"temperature": 2.5}, {"max_tokens": 0},
                                   {"max_tokens": 513}, {"seed": "7"}])
def test_chat_and_apply_refuse_the_same_sampling_fields(field):
    from hsedit.server.app import HttpError, _apply_fields

    with pytest.raises(openai_api.BadRequest) as chat:
        parse({**CHAT, **field})
    with pytest.raises(HttpError) as apply:
        _apply_fields({"path": "a.py", "code": "x = 1\n", "instruction": "rename x to y", **field}, 512)
    assert apply.value.status == 400 and str(apply.value) == str(chat.value)


def test_another_model_is_not_served():
    with pytest.raises(openai_api.UnknownModel, match="embedded"):
        parse({**CHAT, "model": "gpt-4o"})


def stats_with(*records):
    stats = RequestStats(prompt_tokens=10)
    for record in records:
        stats.record(record, 0.0)
    return stats


def test_usage_counts_the_copy_drafters_tokens_as_prediction_tokens_only_with_a_prediction():
    stats = stats_with(StepRecord(COPY, 8, 5, (1, 2, 3, 4, 5, 6)), StepRecord(DSPARK, 4, 2, (7, 8, 9)),
                       StepRecord(None, 0, 0, (10,)))
    usage = openai_api.usage(stats, has_prediction=True)
    assert usage["completion_tokens"] == 10 and usage["total_tokens"] == 20
    assert usage["completion_tokens_details"] == {"accepted_prediction_tokens": 5, "rejected_prediction_tokens": 3}
    none = openai_api.usage(stats, has_prediction=False)["completion_tokens_details"]
    assert none == {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}


def test_the_client_reads_back_the_events_the_server_streamed():
    stats = RequestStats(prompt_tokens=30)
    records = [StepRecord(COPY, 6, 3, (5, 6, 7, 8), price=0.25), StepRecord(None, 0, 0, (9,))]
    events = []
    for i, record in enumerate(records):
        stats.record(record, 0.0)
        finished = i == len(records) - 1
        if finished:
            stats.finish_reason, stats.engine_reported = "stop", (6, 3)
        events.append(StepEvent(0, "r1", list(record.emitted), record.token_sources(),
                                [("abc", COPY), ("d", "target")], "abcd", finished, record, stats))
    from hsedit.engine.requests import GenerationRequest

    reader = wire.StreamReader(key=3)
    reader.feed(wire.start_message("r1", GenerationRequest([1] * 30, max_tokens=99), 0.02))
    rebuilt = [reader.feed(wire.step_message(event)) for event in events]
    assert [e.record for e in rebuilt] == records
    assert [e.pieces for e in rebuilt] == [e.pieces for e in events]
    assert [e.key for e in rebuilt] == [3, 3] and [e.finished for e in rebuilt] == [False, True]
    generation = reader.generation
    assert reader.finished and reader.request.max_tokens == 99
    assert generation.token_ids == [5, 6, 7, 8, 9] and generation.sources == [COPY] * 3 + ["target"] * 2
    assert generation.text == "abcdabcd" and generation.stats.finish_reason == "stop"
    assert generation.stats.engine_reported == (6, 3) and generation.stats.prompt_tokens == 30
    assert generation.stats.accepted_prediction_tokens == stats.accepted_prediction_tokens


def test_an_error_before_the_end_is_raised_as_the_servers_error():
    reader = wire.StreamReader(key=0)
    with pytest.raises(OutputTruncatedError, match="cut off"):
        reader.feed(wire.error_message(OutputTruncatedError("the answer was cut off")))


def test_exit_codes_map_back_to_their_errors():
    assert isinstance(error_for_exit_code(4, "too long"), ContextTooLongError)
    assert isinstance(error_for_exit_code(2, "bad"), UsageError)
    assert isinstance(error_for_exit_code(77, "?"), ServerError)
    assert str(error_for_exit_code(4, "too long")) == "too long"


def test_only_loopback_goes_without_a_key():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com") and not is_loopback("10.0.0.2")
    check_exposure("127.0.0.1", None)
    check_exposure("0.0.0.0", "key")
    with pytest.raises(UsageError, match="--api-key"):
        check_exposure("0.0.0.0", None)


def test_metrics_are_prometheus_text():
    metrics = Metrics()
    metrics.requests[("/v1/apply", 200)] += 2
    stats = stats_with(StepRecord(COPY, 4, 2, (1, 2, 3)))
    stats.finish_reason = "stop"
    metrics.record_step(0.02, [StepEvent(0, "r", [1, 2, 3], [], [], "", True, stats.steps[0], stats)])
    text = metrics.render(waiting=1, running=0)
    assert 'hsedit_http_requests_total{endpoint="/v1/apply",status="200"} 2' in text
    assert 'hsedit_accepted_draft_tokens_total{drafter="copy"} 2' in text
    assert "hsedit_completion_tokens_total 3" in text and "hsedit_requests_waiting 1" in text
    assert 'hsedit_requests_finished_total{reason="stop"} 1' in text
    assert all(line.startswith(("# HELP", "# TYPE", "hsedit_")) for line in text.splitlines())


def test_the_server_setting(tmp_path, monkeypatch):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.hsedit]\nserver = "http://10.0.0.5:8421"\n')
    config = load_config(pyproject)
    monkeypatch.delenv("HSEDIT_SERVER", raising=False)
    assert config.resolve("server", None, None) == "http://10.0.0.5:8421"
    monkeypatch.setenv("HSEDIT_SERVER", "http://127.0.0.1:9000")
    assert config.resolve("server", None, None) == "http://127.0.0.1:9000"
    assert config.resolve("server", "http://x:1", None) == "http://x:1"
    pyproject.write_text("[tool.hsedit]\nserver = 5\n")
    with pytest.raises(UsageError, match="server"):
        load_config(pyproject)


def run_cli(*args, cwd):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "hsedit.cli", *args], check=False, capture_output=True, text=True, timeout=60, cwd=cwd)


def test_an_unreachable_server_is_one_line_and_exit_10(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    done = run_cli("apply", "a.py", "set x to 2", "--server", "http://127.0.0.1:9", cwd=tmp_path)
    assert done.returncode == 10
    assert "cannot reach the hsedit server at http://127.0.0.1:9" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert (tmp_path / "a.py").read_text() == "x = 1\n"


def test_engine_flags_with_a_server_are_refused(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    done = run_cli("apply", "a.py", "set x to 2", "--server", "http://127.0.0.1:9", "--drafter", "ngram", cwd=tmp_path)
    assert done.returncode == 2 and "--drafter is the server's to set" in done.stderr
