"""Shared engines for the tests that drive the real vLLM engine (marker `engine`).

Each engine takes ~20 s to start; every test module shares the same few through
`shared_engine`, which the CLI uses too, so CLI tests reuse them as well.
"""

import os
import socket
from pathlib import Path

# Triton reads this once, when it is first imported, and any test module may import it at
# collection (peft and transformers do): set before anything else so the kernel tests
# (tests/test_kernels.py) run interpreted on CPU whatever the collection order.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from hsedit.edit.prompt import ApplyPrompt  # noqa: E402
from hsedit.engine.engine import EngineOptions, GenerationRequest, shared_engine  # noqa: E402

# Property tests draw the same examples on every run: a clean clone must pass or fail the same way.
settings.register_profile("hsedit", derandomize=True)
settings.load_profile("hsedit")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "inventory.py"

PLAIN = EngineOptions(drafter="none")
COPY = EngineOptions(drafter="ngram")


@pytest.fixture(scope="session")
def plain_engine():
    return shared_engine(PLAIN)


@pytest.fixture(scope="session")
def copy_engine():
    return shared_engine(COPY)


DSPARK = EngineOptions(drafter="dspark")
HYBRID = EngineOptions(drafter="hybrid")


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
