"""The server's pure parts: the request bodies and their one-line refusals, OpenAI's shapes and
usage, the /v1/apply wire format read back by the client, exposure rules, metrics text, the
`server` setting; then the app itself over a scripted engine (no vLLM): the official `openai`
client, hsedit's own client, the key, the metrics' labels and the one error shape."""

import json

import pytest

from hsedit.config import load_config
from hsedit.drafting.chain import DSPARK, COPY, StepRecord
from hsedit.engine.requests import GenerationRequest, StepEvent
from hsedit.engine.stats import RequestStats
from hsedit.errors import (
    ContextTooLongError,
    OutputTruncatedError,
    ServerError,
    UsageError,
    error_for_exit_code,
)
from hsedit.server import openai_api, schema, wire
from hsedit.server.main import check_exposure, is_loopback
from hsedit.server.metrics import Metrics
from hsedit.server.openai_schema import ChatCompletionRequest, CompletionRequest
from hsedit.server.schema import ApplyRequest, BadRequest

CHAT = {"model": "embedded", "messages": [{"role": "user", "content": "Hi"}]}
EDIT = {"path": "a.py", "code": "x = 1\n", "instruction": "set x to 2"}


def parse(body, limit=512, model=ChatCompletionRequest):
    """As the server reads a body: its JSON text, validated, then made a generation."""
    validated = schema.parse(model, json.dumps(body), max_tokens_limit=limit)
    return openai_api.openai_job(validated, served_model="embedded", max_tokens_limit=limit)


def refusal(model, body, limit=512) -> str:
    with pytest.raises(BadRequest) as refused:
        schema.parse(model, json.dumps(body), max_tokens_limit=limit)
    return str(refused.value)


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


@pytest.mark.parametrize(("body", "message"), [
    ([], "the body must be a JSON object"),
    ({"messages": []}, "messages must be a non-empty list"),
    ({"model": "embedded"}, "messages is required"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role must be one of system, developer, user"),
    ({"messages": [{"content": "x"}]}, "messages[0].role is required"),
    ({**CHAT, "n": 2}, "n must be 1"),
    ({**CHAT, "max_tokens": 0}, "max_tokens must be a positive integer"),
    ({**CHAT, "max_tokens": 513}, "max_tokens is 513; this server allows at most 512"),
    ({**CHAT, "max_completion_tokens": 513}, "max_completion_tokens is 513; this server allows at most 512"),
    ({**CHAT, "max_tokens": True}, "max_tokens must be a positive integer"),
    ({**CHAT, "max_tokens": 7.5}, "max_tokens must be a positive integer"),
    ({**CHAT, "temperature": 3}, "temperature must be a number from 0 to 2"),
    ({**CHAT, "seed": "7"}, "seed must be an integer"),
    ({**CHAT, "stop": [""]}, "stop must be a string or a list of non-empty strings"),
    ({**CHAT, "stream": "yes"}, "stream must be true or false"),
    ({**CHAT, "stream_options": []}, "stream_options must be a JSON object"),
    ({**CHAT, "prediction": {"type": "image"}}, 'prediction.type must be "content"'),
    ({**CHAT, "prediction": {"type": "content", "content": 5}}, "prediction.content must be a string or a list"),
    ({**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content must be a string or a list of text parts"),
])
def test_bad_chat_requests_are_refused_in_one_line_that_names_the_field(body, message):
    said = refusal(ChatCompletionRequest, body)
    assert said.startswith(message), said
    assert "\n" not in said and len(said) < 120 and "input" not in said.lower()  # never pydantic's report


def test_a_body_that_is_not_json_is_said_so():
    with pytest.raises(BadRequest, match="^the body is not valid JSON: "):
        schema.parse(ChatCompletionRequest, b"{not json")


def test_a_text_completion_request_shares_the_chat_checks_and_has_its_own_shape():
    text = parse({"model": "embedded", "prompt": ["def f():"], "max_tokens": 30, "stream": True},
                 model=CompletionRequest)
    assert text.kind == openai_api.TEXT and text.text_prompt == "def f():" and text.messages is None
    assert text.generation.max_tokens == 30 and text.stream and text.asked_max_tokens
    for bad, message in (({"prompt": ""}, "prompt must be a non-empty string"),
                         ({"prompt": ["a", "b"]}, "prompt must be a non-empty string"),
                         ({"prompt": "x", "max_tokens": 513}, "max_tokens is 513"),
                         ({"prompt": "x", "temperature": 3}, "temperature must be")):
        assert refusal(CompletionRequest, bad).startswith(message)
    stats = stats_with(StepRecord(None, 0, 0, (5,)))
    body = openai_api.completion("cmpl-1", "embedded", "pass", stats, False, openai_api.TEXT).model_dump()
    assert body["object"] == "text_completion" and body["choices"][0]["text"] == "pass"
    assert "message" not in body["choices"][0]
    piece = openai_api.chunk("cmpl-1", "embedded", openai_api.TEXT, text="pa").model_dump()
    assert piece["object"] == "text_completion" and piece["choices"][0]["text"] == "pa"
    assert "usage" not in piece  # only the usage chunk carries usage


def test_streamed_chunks_are_openais():
    stats = stats_with(StepRecord(COPY, 4, 2, (1, 2, 3)))
    first, middle, last, counts = (
        openai_api.chunk("c", "m", role="assistant", text="").model_dump(),
        openai_api.chunk("c", "m", text="x = ").model_dump(),
        openai_api.chunk("c", "m", finish="stop").model_dump(),
        openai_api.chunk("c", "m", usage_=openai_api.usage(stats, True)).model_dump(),
    )
    choice = {"index": 0, "finish_reason": None, "logprobs": None}
    assert first["choices"] == [{**choice, "delta": {"role": "assistant", "content": ""}}]
    assert middle["choices"] == [{**choice, "delta": {"content": "x = "}}]
    assert last["choices"] == [{**choice, "delta": {}, "finish_reason": "stop"}]
    assert counts["choices"] == [] and counts["usage"]["completion_tokens"] == 3
    assert set(first) == {"id", "object", "created", "model", "choices"}
    assert first["object"] == "chat.completion.chunk"


@pytest.mark.parametrize("field", [{"temperature": False}, {"temperature": 2.5}, {"max_tokens": 0},
                                   {"max_tokens": 513}, {"seed": "7"}])
def test_chat_and_apply_refuse_the_same_sampling_fields(field):
    assert refusal(ApplyRequest, {**EDIT, **field}) == refusal(ChatCompletionRequest, {**CHAT, **field})


@pytest.mark.parametrize(("body", "message"), [
    ({"code": "x = 1\n", "instruction": "go"}, "path is required"),
    ({**EDIT, "path": " "}, "path must name the file"),
    ({**EDIT, "code": None}, "code must be the file's text"),
    ({**EDIT, "instruction": " "}, "the instruction is empty: say what to change"),
    ({**EDIT, "instruction": 5}, "instruction must be a string"),
    ({**EDIT, "update": ["x"]}, "update must be a string"),
    ({**EDIT, "max_deletion": 2}, "max_deletion must be a number from 0 to 1"),
])
def test_bad_apply_requests_are_refused_in_one_line(body, message):
    said = refusal(ApplyRequest, body)
    assert said.startswith(message) and "\n" not in said, said


def test_the_apply_body_the_client_builds_is_the_one_the_server_reads():
    built = schema.parse(ApplyRequest, {**EDIT, "update": None, "max_tokens": 40, "temperature": 0.0, "seed": None})
    sent = built.model_dump_json(exclude_none=True)
    assert schema.parse(ApplyRequest, sent, max_tokens_limit=512) == built
    assert "null" not in sent  # what the client leaves out, the server fills in with the same defaults
    snippet = schema.parse(ApplyRequest, {"path": "a.py", "code": "x = 1\n", "instruction": None, "update": "x = 2"})
    assert snippet.instruction == "" and snippet.update == "x = 2"  # a snippet merge needs no instruction


def test_one_error_shape_everywhere():
    from hsedit.server.http_error import HttpError, error_response

    http = json.loads(error_response(HttpError(400, "bad field", "invalid_request_error", 2)).body)
    line = json.loads(wire.as_line(wire.error_line(OutputTruncatedError("cut off"))))
    plain = schema.ErrorBody.of("gone", "server_error").model_dump()
    assert http == {"error": {"message": "bad field", "type": "invalid_request_error", "exit_code": 2}}
    assert line == {"type": "error", "error": {"message": "cut off", "type": "edit_error", "exit_code": 5}}
    assert plain == {"error": {"message": "gone", "type": "server_error"}}  # no exit code: not an edit's


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
    usage = openai_api.usage(stats, has_prediction=True).model_dump()
    assert usage["completion_tokens"] == 10 and usage["total_tokens"] == 20
    assert usage["completion_tokens_details"] == {"accepted_prediction_tokens": 5, "rejected_prediction_tokens": 3}
    none = openai_api.usage(stats, has_prediction=False).model_dump()["completion_tokens_details"]
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

    def sent(line):  # as it travels: a line of JSON text
        return wire.read_line(wire.as_line(line).encode())

    reader = wire.StreamReader(key=3)
    reader.feed(sent(wire.start_line("r1", GenerationRequest([1] * 30, max_tokens=99), 0.02)))
    rebuilt = [reader.feed(sent(wire.step_line(event))) for event in events]
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
    line = wire.read_line(wire.as_line(wire.error_line(OutputTruncatedError("the answer was cut off"))))
    with pytest.raises(OutputTruncatedError, match="cut off"):
        reader.feed(line)
    with pytest.raises(BadRequest, match="^step.record is required"):  # a broken line is one line too
        wire.read_line('{"type": "step", "pieces": [], "text": "", "finished": false}')


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


# -- the app over a scripted engine: HTTP, both clients, no vLLM ---------------------------------
class Chars:
    """One token per character; the chat template joins the messages."""

    def encode(self, text):
        return [ord(c) for c in text]

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


class ScriptedEngine:
    """What `EngineThread` drives, without vLLM: every request answers `answer`, three characters
    a step, each step a copy draft of two tokens with one kept (so the prediction counts show);
    `fail` makes the next step raise, as a broken engine does; with `hold`, a request stops after
    its first step until `release` is set, so a test acts on it certainly still running."""

    max_model_len = 4096
    drafter_target = None
    cost_table = None

    def __init__(self, answer, hold=False):
        import threading

        from hsedit.engine.engine import Engine

        self.threads = {"built": threading.get_ident(), "stepped": set(), "closed": None}
        self.answer, self.tokenizer, self.fail = answer, Chars(), None
        self.running, self.ids = {}, iter(range(10**6))
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.answer_room = Engine.answer_room.__get__(self)  # the real context check

    def count_tokens(self, text):
        return len(text)

    def add(self, request, key):
        rid = f"req-{next(self.ids)}"
        self.running[rid] = [key, request, RequestStats(prompt_tokens=len(request.prompt)), 0]
        return rid

    def abort(self, ids):
        for rid in ids:
            self.running.pop(rid, None)

    def close(self):
        import threading

        self.threads["closed"] = threading.get_ident()

    def step(self):
        import threading

        self.threads["stepped"].add(threading.get_ident())
        if self.fail:
            raise RuntimeError(self.fail)
        events = []
        for rid, item in list(self.running.items()):
            key, request, stats, done = item
            if done and not self.release.is_set():
                continue
            end = min(len(self.answer), request.max_tokens, done + 3)
            piece, item[3] = self.answer[done:end], end
            record = StepRecord(COPY, 2, 1, tuple(ord(c) for c in piece))
            stats.record(record, 0.0)
            finished = end >= min(len(self.answer), request.max_tokens)
            if finished:
                stats.finish_reason = "stop" if end == len(self.answer) else "length"
                del self.running[rid]
            events.append(StepEvent(key, rid, list(record.emitted), record.token_sources(), [(piece, COPY)], piece,
                                    finished, record, stats))
        if not events:
            import time

            time.sleep(0.005)  # held: the engine thread would spin
        return events


@pytest.fixture
def scripted_server():
    """start(answer, **settings) -> (url, engine): `hsedit serve`'s app on a loopback port."""
    import threading
    import time

    import uvicorn

    from hsedit.server.app import ServerSettings, create_app
    from hsedit.server.engine_thread import EngineThread
    from tests.conftest import free_port

    running = []

    def start(answer="x = 2", max_queue=4, hold=False, **settings):
        engine_thread = EngineThread(lambda: ScriptedEngine(answer, hold), max_queue=max_queue)
        engine_thread.start()
        engine = engine_thread.engine
        app = create_app(engine_thread, ServerSettings(served_model="embedded", drafter="copy", **settings))
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        running.append((server, thread, engine_thread))
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the app did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{port}", engine

    yield start
    for server, thread, engine_thread in running:
        engine_thread.engine.release.set()
        server.should_exit = True
        thread.join(10)
        engine_thread.stop()


def test_the_engine_is_built_stepped_and_closed_on_the_engine_thread_alone():
    """Not on the caller's: each thread that computes gets a team of OpenMP workers of its own,
    and two teams slow every step of a real engine (docs/benchmarks.md)."""
    import threading

    from hsedit.server.engine_thread import EngineThread

    engine_thread = EngineThread(lambda: ScriptedEngine("x = 2"), max_queue=1)
    engine_thread.start()
    engine = engine_thread.engine
    finished = threading.Event()
    engine_thread.submit(lambda e: GenerationRequest([1, 2], max_tokens=8),
                         lambda item: getattr(item, "finished", False) and finished.set())
    assert finished.wait(30)
    engine_thread.stop()
    threads = engine.threads
    assert threads["stepped"] == {threads["built"]} and threads["closed"] == threads["built"]
    assert threads["built"] != threading.get_ident()


def test_an_engine_that_cannot_start_fails_the_start_itself():
    from hsedit.server.engine_thread import EngineThread

    def broken():
        raise RuntimeError("no such model")

    with pytest.raises(RuntimeError, match="no such model"):
        EngineThread(broken, max_queue=1).start()


def http(method, url, body=None, key=None, raw=None):
    """(status, text) of one request, whatever the status."""
    import urllib.error
    import urllib.request

    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_openai_client_reads_every_answer_of_the_app(scripted_server):
    import openai

    url, _ = scripted_server("x = 2")
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list()] == ["embedded"]
    messages = [{"role": "user", "content": "x = 1"}]
    answer = client.chat.completions.create(model="embedded", messages=messages,
                                            prediction={"type": "content", "content": "x = 1"})
    assert answer.choices[0].message.content == "x = 2" and answer.choices[0].finish_reason == "stop"
    details = answer.usage.completion_tokens_details  # two steps, each one of two copy drafts kept
    assert (details.accepted_prediction_tokens, details.rejected_prediction_tokens) == (2, 2)
    assert answer.usage.prompt_tokens == len("<user>x = 1<assistant>") and answer.usage.completion_tokens == 5
    chunks = list(client.chat.completions.create(model="embedded", messages=messages, stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "x = 2"
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 5 and chunks[-2].choices[0].finish_reason == "stop"
    cut = client.completions.create(model="embedded", prompt="x", max_tokens=2)
    assert cut.choices[0].text == "x " and cut.choices[0].finish_reason == "length"
    streamed = client.completions.create(model="embedded", prompt="x", stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == "x = 2"
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=messages)
    with pytest.raises(openai.BadRequestError, match="temperature must be a number from 0 to 2"):
        client.chat.completions.create(model="embedded", messages=messages, temperature=3)


def test_hsedits_client_edits_on_the_app_and_gets_its_errors_by_exit_code(scripted_server):
    from hsedit.apply import EditJob, finish_edit
    from hsedit.client import ServerClient, ServerRunner
    from hsedit.edit.files import SourceFile

    url, engine = scripted_server("x = 2")
    runner = ServerRunner(ServerClient(url))
    assert runner.description == f"server {url}, drafter: copy" and runner.dspark_target is None
    job = EditJob.for_source(SourceFile.from_text("a.py", "x = 1\n"), "a.py", "set x to 2")
    (done,) = runner.generate([job])
    assert done.error is None and done.generation.text == "x = 2"
    assert finish_edit(job, done.generation, done.request).new_text == "x = 2\n"
    # The server's own verdict on an answer cut off: the stream's last line, in the one error shape.
    status, text = http("POST", url + "/v1/apply", {**EDIT, "max_tokens": 2})
    last = json.loads(text.splitlines()[-1])
    assert status == 200 and last["type"] == "error" and last["error"]["exit_code"] == OutputTruncatedError.exit_code
    assert last["error"]["type"] == "edit_error" and "cut off at 2 tokens" in last["error"]["message"]
    # A body the server refuses is the edit's usage error (exit 2) on the client, as it is here.
    with pytest.raises(UsageError, match="max_tokens must be a positive integer"):
        list(ServerClient(url).stream_lines("/v1/apply", ApplyRequest.model_construct(**EDIT, max_tokens=0)))
    # A broken engine: the stream ends with the error, and the client fails that edit with it.
    engine.fail = "the engine broke"
    (failed,) = runner.generate([job])
    assert str(failed.error) == "the generation failed: the engine broke" and failed.error.exit_code == 1


def test_a_failed_generation_is_the_one_error_shape_in_both_streams(scripted_server):
    url, engine = scripted_server("x = 2")
    engine.fail = "boom"
    chat = {"messages": [{"role": "user", "content": "Hi"}], "stream": True}
    status, text = http("POST", url + "/v1/chat/completions", chat)
    events = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert status == 200 and events[-1] == "[DONE]"
    assert json.loads(events[-2]) == {"error": {"message": "the generation failed: boom", "type": "server_error"}}
    status, text = http("POST", url + "/v1/apply", EDIT)
    last = json.loads(text.splitlines()[-1])
    assert last == {"type": "error", "error": {"message": "the generation failed: boom", "type": "server_error",
                                               "exit_code": 1}}


def test_the_key_and_the_request_count_are_two_pieces_and_the_labels_are_the_routes(scripted_server):
    url, _ = scripted_server("x = 2", api_key="k", max_body_bytes=200)
    chat = {"messages": [{"role": "user", "content": "Hi"}]}
    cases = [
        (http("POST", url + "/v1/chat/completions", chat), 401, "authentication_error"),
        (http("POST", url + "/v1/chat/completions", chat, "wrong"), 401, "authentication_error"),
        (http("GET", url + "/nope"), 401, "authentication_error"),  # the key first: no path is told
        (http("GET", url + "/nope", key="k"), 404, "not_found_error"),
        (http("GET", url + "/v1/apply", key="k"), 405, "invalid_request_error"),
        (http("POST", url + "/v1/apply", {**EDIT, "code": "x = 1\n" * 100}, "k"), 413, "invalid_request_error"),
        (http("POST", url + "/v1/apply", {**EDIT, "temperature": 9}, "k"), 400, "invalid_request_error"),
        (http("POST", url + "/v1/chat/completions", None, "k", raw=b"{oops"), 400, "invalid_request_error"),
    ]
    for (status, text), expected, kind in cases:
        assert status == expected, text
        (error,) = json.loads(text).values()
        assert error["type"] == kind and error["message"] and "\n" not in error["message"]
    assert json.loads(cases[6][0][1])["error"] == {
        "message": "temperature must be a number from 0 to 2", "type": "invalid_request_error", "exit_code": 2}
    assert json.loads(cases[7][0][1])["error"]["message"].startswith("the body is not valid JSON")
    status, health = http("GET", url + "/health")  # open without a key
    assert status == 200 and json.loads(health)["drafter"] == "copy"
    status, text = http("GET", url + "/metrics", key="k")
    counted = {line.split("{")[1].split("}")[0]: float(line.split()[-1])
               for line in text.splitlines() if line.startswith("hsedit_http_requests_total{")}
    assert counted == {
        'endpoint="/v1/chat/completions",status="401"': 2, 'endpoint="/v1/chat/completions",status="400"': 1,
        'endpoint="other",status="401"': 1, 'endpoint="other",status="404"': 1,
        'endpoint="/v1/apply",status="405"': 1, 'endpoint="/v1/apply",status="413"': 1,
        'endpoint="/v1/apply",status="400"': 1, 'endpoint="/health",status="200"': 1,
    }


def _open_stream(url, path, body, key=None):
    """A streamed request whose first line has been read: admitted and generating."""
    import http.client
    from urllib.parse import urlsplit

    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    connection.request("POST", path, json.dumps(body), headers)
    response = connection.getresponse()
    assert response.status == 200
    assert response.readline()
    return connection, response


def test_a_client_gone_mid_stream_has_its_request_aborted(scripted_server):
    import socket
    import time

    from tests.conftest import metric

    url, engine = scripted_server("x = 2 " * 50, hold=True)
    chat = {"messages": [{"role": "user", "content": "Hi"}], "stream": True}
    connection, _ = _open_stream(url, "/v1/chat/completions", chat)
    assert len(engine.running) == 1  # held after its first step: it cannot have finished
    connection.sock.shutdown(socket.SHUT_RDWR)  # the client is gone (a close waits for the response's reader)
    deadline = time.monotonic() + 30
    while engine.running or metric(url, "hsedit_requests_aborted_total") != 1:
        assert time.monotonic() < deadline, "the request of the client that left was not aborted"
        time.sleep(0.05)
    engine.release.set()
    status, text = http("POST", url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200 and json.loads(text)["choices"][0]["message"]["content"].startswith("x = 2")


def test_a_full_queue_gets_429_with_retry_after(scripted_server):
    import urllib.error
    import urllib.request

    url, engine = scripted_server("x = 2", max_queue=1, hold=True)
    chat = {"messages": [{"role": "user", "content": "Hi"}], "stream": True}
    connection, first = _open_stream(url, "/v1/chat/completions", chat)
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(chat).encode(),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 429 and refused.value.headers.get("Retry-After") == "1"
    assert json.loads(refused.value.read())["error"]["message"]
    engine.release.set()
    assert first.read().decode().rstrip().endswith("data: [DONE]")  # the one admitted ends normally
    connection.close()


BLOCKED = """
import sys
class Blocked:  # the light install: what `pip install hsedit` gives a pre-commit hook
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("vllm", "torch", "fastapi", "starlette", "uvicorn"):
            raise ImportError(f"{name} is not installed here")
sys.meta_path.insert(0, Blocked())
from hsedit.cli import main
sys.argv = ["hsedit", *sys.argv[1:]]
main()
"""


def test_the_client_runs_without_vllm_or_fastapi(scripted_server, tmp_path):
    import subprocess
    import sys

    url, _ = scripted_server("x = 2")
    (tmp_path / "a.py").write_text("x = 1\n")
    done = subprocess.run([sys.executable, "-c", BLOCKED, "apply", "a.py", "set x to 2", "--server", url, "--json"],
                          check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["new_text"] == "x = 2\n"
