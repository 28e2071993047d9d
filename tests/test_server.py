"""`hsedit serve` on the real engine, started as users start it (a subprocess on a free loopback
port), and its clients: the official `openai` client, `hsedit apply/batch --server`, raw HTTP."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from hsedit.apply import EditJob, EmbeddedRunner, finish_edit
from hsedit.scope import run_edit
from hsedit.edit.check import check_edit
from hsedit.edit.files import SourceFile
from hsedit.engine.engine import GenerationRequest
from tests.conftest import Server, greedy_gaps
from hsedit.errors import HseditError
from hsedit.train.finetune.dataset import heldout_sample

pytestmark = pytest.mark.engine

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
KEY = "test-key-123"
# Log-probability below the top choice that fp32 noise can explain (a near tie flipped by
# another batch's kernels is ~1e-5 apart; a token chosen wrongly is typically > 0.1 apart).
GREEDY_NOISE = 1e-2


@pytest.fixture(scope="module")
def server():
    running = Server()  # the default: hybrid drafter, no key, loopback
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def guarded_server():
    """Drafting off, a key, and room for one request at a time."""
    running = Server("--drafter", "none", "--api-key", KEY, "--max-queue", "1", "--max-body-bytes", "4096")
    yield running
    if running.process.poll() is None:
        running.stop()


def _post(url, body, key=None, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), error.headers


def _repeat_messages(code):
    return [{"role": "user", "content": "Repeat this code exactly:\n```python\n" + code + "```"}]


def test_openai_client_with_a_prediction_matches_the_embedded_engine(server, hybrid_engine):
    code = (EXAMPLES / "inventory.py").read_text()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    (model,) = [m.id for m in client.models.list()]
    messages = _repeat_messages(code)

    def copy_counts() -> tuple[float, float]:  # the server's (accepted, rejected) copy drafts so far
        drafted = server.metric('hsedit_draft_tokens_total{drafter="copy"}')
        accepted = server.metric('hsedit_accepted_draft_tokens_total{drafter="copy"}')
        return accepted, drafted - accepted

    before = copy_counts()
    answer = client.chat.completions.create(
        model=model, messages=messages, max_tokens=200, prediction={"type": "content", "content": code}
    )
    after = copy_counts()
    streamed, usage = "", None
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=200, prediction={"type": "content", "content": code},
        stream=True, stream_options={"include_usage": True},
    ):
        if chunk.choices:
            streamed += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    after_stream = copy_counts()
    prompt = hybrid_engine.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    (embedded,) = hybrid_engine.generate([GenerationRequest(prompt, max_tokens=200)])
    assert answer.choices[0].message.content == streamed == embedded.text
    details = answer.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0.5 * answer.usage.completion_tokens  # it copied the prediction
    # OpenAI's counts are the copy drafter's own, as the server's counters saw each request. (Not
    # equal between the two runs: the hybrid's cost rule reads measured timings, so which chain a
    # step verifies may differ; the answer may not, and does not.)
    for got, start, end in ((details, before, after), (usage.completion_tokens_details, after, after_stream)):
        assert (got.accepted_prediction_tokens, got.rejected_prediction_tokens) == (end[0] - start[0], end[1] - start[1])
    assert answer.usage.prompt_tokens == embedded.stats.prompt_tokens
    plain = client.chat.completions.create(model=model, messages=messages, max_tokens=200)
    assert plain.choices[0].message.content == embedded.text  # the prediction never changes the answer
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0  # none without one, as OpenAI
    # /v1/completions continues a prompt as given (vLLM's benchmark client and completion clients).
    text = client.completions.create(model=model, prompt=prompt, max_tokens=200)
    assert text.choices[0].text == embedded.text and text.usage.completion_tokens == len(embedded.token_ids)


def test_apply_through_the_server_prints_what_the_embedded_engine_does(server, hybrid_engine, tmp_path):
    path = tmp_path / "temperature.py"
    path.write_text((EXAMPLES / "temperature.py").read_text())
    instruction = "set FREEZING_F to 32.5"
    done = subprocess.run(
        [sys.executable, "-m", "hsedit.cli", "apply", str(path), instruction, "--json", "--server", server.url],
        check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    remote = json.loads(done.stdout)
    job = EditJob.for_source(SourceFile.from_text("temperature.py", path.read_text()), "temperature.py", instruction)
    local = run_edit(EmbeddedRunner(hybrid_engine), job)
    assert remote["new_text"] == local.new_text and remote["diff"] == local.diff
    assert "FREEZING_F = 32.5" in remote["new_text"]
    assert remote["stats"]["drafters"]["copy"]["accepted"] > 0


def test_a_server_is_compiled_by_default_and_answers_greedily_within_the_dtypes_noise(plain_engine):
    """`hsedit serve` without a flag runs vLLM's compiled mode; its kernels are not the eager
    engine's, so its answer is judged as the bench judges one: every token the eager target's
    greedy choice up to the dtype's noise."""
    from hsedit.apply import edit_request
    from hsedit.engine.engine import GREEDY_TOLERANCE

    running = Server(compiled=True)
    try:
        health = json.loads(urllib.request.urlopen(running.url + "/health", timeout=10).read())
        dtype = plain_engine.options.resolved_dtype
        assert health["compiled"] is True and health["dtype"] == dtype
        code, instruction = (EXAMPLES / "temperature.py").read_text(), "set FREEZING_F to 32.5"
        status, text, _ = _post(running.url + "/v1/apply", {"path": "temperature.py", "code": code,
                                                             "instruction": instruction})
        assert status == 200, text
        lines = [json.loads(line) for line in text.splitlines()]
        assert lines[-1]["type"] == "result" and "FREEZING_F = 32.5" in lines[-1]["new_text"], lines[-1]
        answer = [t for line in lines if line["type"] == "step" for t in line["record"]["emitted"]]
        job = EditJob.for_source(SourceFile.from_text("temperature.py", code), "temperature.py", instruction)
        gaps = greedy_gaps(plain_engine, edit_request(plain_engine, job).prompt, answer)
        assert max(gaps) <= GREEDY_TOLERANCE[dtype], gaps
    finally:
        assert running.stop() == 0


def _eight_files(directory: Path) -> list[tuple[str, str]]:
    tasks = [
        ("inventory.py", "change the apple's price in the example stock to 0.6"),
        ("shapes.py", "rename the class Rectangle to Box"),
        ("temperature.py", "set FREEZING_F to 32.5"),
        ("textstats.py", "remove debug print statements"),
    ]
    for name, _ in tasks:
        (directory / name).write_text((EXAMPLES / name).read_text())
    for i, example in enumerate(heldout_sample(4)):
        name = f"held{i}{Path(example.path).suffix}"
        (directory / name).write_text(example.before)
        tasks.append((name, example.instruction))
    return tasks


def test_eight_concurrent_edits_are_each_their_own_and_exact(server, plain_engine, tmp_path):
    tasks = _eight_files(tmp_path)
    results: dict[str, dict] = {}

    answers: dict[str, list[int]] = {}  # the token ids the server generated, from its step lines

    def edit(name: str, instruction: str) -> None:
        code = (tmp_path / name).read_text()
        status, text, _ = _post(server.url + "/v1/apply", {"path": name, "code": code, "instruction": instruction})
        assert status == 200, text
        lines = [json.loads(line) for line in text.splitlines()]
        results[name] = lines[-1]
        answers[name] = [t for line in lines if line["type"] == "step" for t in line["record"]["emitted"]]

    threads = [threading.Thread(target=edit, args=task) for task in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == sorted(name for name, _ in tasks)  # none lost
    # Drafting off, the same eight at once (plain decoding is not batch-invariant on fp32 CPU
    # kernels, so the comparison is at the same concurrency).
    jobs = [EditJob.for_source(SourceFile.from_text(n, (tmp_path / n).read_text()), n, i) for n, i in tasks]
    for done in EmbeddedRunner(plain_engine).generate(jobs, max_in_flight=len(jobs)):
        job = jobs[done.index]
        result, answer = results[job.display_path], answers[job.display_path]
        same = answer == done.generation.token_ids
        if not same:
            # The server's batch composition depends on arrival times, and fp32 CPU kernels are
            # not batch-invariant: a near tie may go the other way there. The server's answer
            # must still be greedy decoding, token by token, up to that noise.
            gaps = greedy_gaps(plain_engine, done.request.prompt, answer)
            assert max(gaps) < GREEDY_NOISE, (
                f"{job.display_path}: token {gaps.index(max(gaps))} of the server's answer lies {max(gaps):.3g} "
                "below the model's top choice: not greedy decoding"
            )
        try:
            expected = finish_edit(job, done.generation, done.request)
        except HseditError as error:  # a runaway answer is cut off the same way
            if same:
                assert result == {"type": "error", "error": {"message": str(error), "type": "edit_error",
                                                             "exit_code": error.exit_code}}
            continue
        if same:
            assert result == {**result, "type": "result", "new_text": expected.new_text}, result
        if result["type"] != "result":
            continue  # a different answer (above), refused on its own terms
        assert result["diff"] == "" or result["diff"].startswith(f"--- a/{job.display_path}\n")
        # The instruction check's verdict travels with the result, and a failed one is the refusal.
        verdict = check_edit(job.display_path, job.source.text, result["new_text"], job.instruction)
        assert result["check"] == verdict.as_dict(), result["check"]
        if verdict.failed and result["validation"]["ok"] and result["guard"]["ok"]:
            assert "does not do what was asked" in result["refusal"], result["refusal"]


def test_the_batch_client_runs_on_the_server(server, tmp_path):  # hooks on a server: test_precommit.py
    tasks = _eight_files(tmp_path)
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(json.dumps({"path": n, "instruction": i}) + "\n" for n, i in tasks))
    done = subprocess.run(
        [sys.executable, "-m", "hsedit.cli", "batch", str(task_file), "--patch", str(tmp_path / "all.diff")],
        check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "HSEDIT_SERVER": server.url},
    )
    assert done.returncode in (0, 1), done.stderr  # 1: some edit failed its checks, reported per task
    rows = [json.loads(line) for line in (tmp_path / "tasks.jsonl.results.jsonl").read_text().splitlines()]
    assert sorted(r["path"] for r in rows) == sorted(n for n, _ in tasks)
    assert any(r["status"] == "ok" for r in rows)


def test_a_client_killed_mid_stream_leaves_the_server_serving(guarded_server):
    """The real engine's side of a client that dies mid-stream: nothing is left running and the
    next request is answered. (That the request is aborted, not run to its end, is certain only
    with an engine held mid-request: test_server_protocol.py.)"""
    url = guarded_server.url
    client = subprocess.Popen([sys.executable, "-c", f"""
import json, sys, urllib.request
body = json.dumps({{"messages": [{{"role": "user", "content": "Write a long story about a dragon."}}],
                   "max_tokens": 600, "stream": True}}).encode()
request = urllib.request.Request("{url}/v1/chat/completions", data=body,
    headers={{"Content-Type": "application/json", "Authorization": "Bearer {KEY}"}})
response = urllib.request.urlopen(request)
response.readline()
print("streaming", flush=True)
sys.stdin.read()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert client.stdout.readline().strip() == "streaming"
    client.kill()
    client.wait()
    deadline = time.time() + 60
    while guarded_server.metric("hsedit_requests_running", KEY) != 0:
        assert time.time() < deadline, "the request of the killed client still runs"
        time.sleep(0.2)
    status, text, _ = _post(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                          "max_tokens": 8}, KEY)
    assert status == 200 and json.loads(text)["choices"][0]["message"]["content"]


def test_bad_requests_get_their_status_and_one_message(guarded_server):
    url = guarded_server.url
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    cases = [
        (_post(url + "/v1/chat/completions", chat), 401),  # no key
        (_post(url + "/v1/chat/completions", chat, "wrong-key"), 401),
        (_post(url + "/v1/chat/completions", None, KEY, raw=b"{not json"), 400),
        (_post(url + "/v1/chat/completions", {**chat, "max_tokens": 10**9}, KEY), 400),
        (_post(url + "/v1/chat/completions", {"messages": []}, KEY), 400),
        (_post(url + "/v1/apply", {"path": "a.py", "code": "x = 1\n" * 2000, "instruction": "x"}, KEY), 413),
        (_post(url + "/v1/apply", {"path": "a.py", "code": "x = 1\n", "instruction": " "}, KEY), 400),
    ]
    for (status, text, _), expected in cases:
        assert status == expected, text
        error = json.loads(text)["error"]
        assert error["message"] and "\n" not in error["message"]
    health = urllib.request.urlopen(url + "/health", timeout=5)  # open without a key
    assert json.loads(health.read())["drafter"] == "none"


def test_sigterm_finishes_what_runs_and_exits_0(guarded_server):
    """SIGTERM while a streamed answer is being written: text keeps coming after the signal (so
    the request was certainly in flight), the answer ends normally, the server exits 0."""
    client = openai.OpenAI(base_url=guarded_server.url + "/v1", api_key=KEY)
    # Well inside the server's grace (GRACEFUL_SHUTDOWN_S, 30 s), past which a request is cut by
    # design: 128 tokens take about 6 s on a 2-core AVX2 CPU in fp32.
    stream = client.chat.completions.create(
        model="embedded", messages=[{"role": "user", "content": "Write a story about a dragon."}],
        max_tokens=128, stream=True,
    )
    after_signal, finish = 0, None
    signalled = False
    for chunk in stream:
        if not chunk.choices:
            continue
        if chunk.choices[0].delta.content:
            if signalled:
                after_signal += 1
            else:
                guarded_server.process.send_signal(signal.SIGTERM)
                signalled = True
        finish = chunk.choices[0].finish_reason or finish
    assert signalled and after_signal > 0, "no text after SIGTERM: the request was not in flight"
    assert finish in ("stop", "length")  # it was finished, not cut
    assert guarded_server.stop() == 0

def test_a_public_host_needs_a_key():
    done = subprocess.run([sys.executable, "-m", "hsedit.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
                          check=False, capture_output=True, text=True, timeout=60, env={**os.environ, "HSEDIT_API_KEY": ""})
    assert done.returncode == 2
    assert "--api-key" in done.stderr and len(done.stderr.strip().splitlines()) == 1
