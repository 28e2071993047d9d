"""Shared engines for the tests that drive the real vLLM engine (marker `engine`).

Each engine takes ~20 s to start; every test module shares the same few through
`shared_engine`, which the CLI uses too, so CLI tests reuse them as well.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

# Triton reads this once, when it is first imported, and any test module may import it at
# collection (peft and transformers do): set before anything else so the kernel tests
# (tests/test_kernels.py) run interpreted on CPU whatever the collection order.
os.environ.setdefault("TRITON_INTERPRET", "1")
# The CLI's commands run in the test's own process, on the shared engines below, unless a test
# asks for the background engine itself (tests/test_daemon.py): none is left running after a test.
os.environ["HSEDIT_DAEMON"] = "0"
# The exactness tests hold the engines to token identity with plain decoding, which fp32 keeps on
# this CPU; the default bf16 is held to greedy-within-tolerance by tests/test_dtype.py.
TEST_DTYPE = "float32"
os.environ["HSEDIT_DTYPE"] = TEST_DTYPE

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from hsedit.edit.prompt import ApplyPrompt  # noqa: E402
from hsedit.engine.engine import EngineOptions, GenerationRequest, shared_engine  # noqa: E402

# Property tests draw the same examples on every run: a clean clone must pass or fail the same way.
settings.register_profile("hsedit", derandomize=True)
settings.load_profile("hsedit")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "inventory.py"

PLAIN = EngineOptions(drafter="none", dtype=TEST_DTYPE)
COPY_ENGINE = EngineOptions(drafter="copy", dtype=TEST_DTYPE)


@pytest.fixture(scope="session")
def plain_engine():
    return shared_engine(PLAIN)


@pytest.fixture(scope="session")
def copy_engine():
    return shared_engine(COPY_ENGINE)


DSPARK = EngineOptions(drafter="dspark", dtype=TEST_DTYPE)
HYBRID = EngineOptions(drafter="hybrid", dtype=TEST_DTYPE)


@pytest.fixture(scope="session")
def dspark_engine():
    return shared_engine(DSPARK)


@pytest.fixture(scope="session")
def hybrid_engine():
    return shared_engine(HYBRID)


@pytest.fixture(scope="session")
def prompts(plain_engine):
    """A copy-heavy edit, code to repeat, chat and code generation: the engine tests' mix."""
    code = EXAMPLE.read_text()
    edit = ApplyPrompt.build("inventory.py", code, "rename the function total_value to inventory_value")
    return {
        "copy-heavy edit": edit.render(plain_engine.tokenizer),
        "repeat code": plain_engine.chat_prompt("Repeat this code exactly:\n```python\n" + code + "```"),
        "chat": plain_engine.chat_prompt("What are three good habits for writing readable Python code?"),
        "code generation": plain_engine.chat_prompt("Write a Python function that tells whether a number is prime."),
    }


def requests_for(prompts, max_tokens=160):
    return [GenerationRequest(p, max_tokens=max_tokens) for p in prompts.values()]


def free_port() -> int:
    """A loopback port nobody listens on now (for the servers the tests start)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def greedy_gaps(engine, prompt_ids: list[int], answer_ids: list[int]) -> list[float]:
    """Each answer token's distance below the top choice, scored by `engine` (Engine.greedy_gaps)."""
    return engine.greedy_gaps(prompt_ids, answer_ids)


def metric(url: str, name: str, key: str | None = None) -> float:
    """The sum of a server's /metrics samples whose line starts with `name` (labels included)."""
    request = urllib.request.Request(url + "/metrics")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    text = urllib.request.urlopen(request, timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


class Server:
    """`hsedit serve ARGS` as users start it: a subprocess on a free loopback port, up once
    /health answers."""

    def __init__(self, *args: str, compiled: bool = False) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.devnull, "w")  # noqa: SIM115 - closed in stop()
        # Eager unless a test asks for the compiled default (no flag): a compiled start takes a
        # minute, and eager answers are what the in-process engines of the tests give.
        mode = () if compiled else ("--no-compile",)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "hsedit.cli", "serve", "--port", str(self.port), *mode, *args],
            stdout=self.log, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.time() + 300
        while time.time() < deadline:
            assert self.process.poll() is None, self.process.stderr.read()
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError("the server did not come up")

    def metric(self, name: str, key: str | None = None) -> float:
        return metric(self.url, name, key)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=120)
        self.log.close()
        return code
