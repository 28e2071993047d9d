"""Shared engines for the tests that drive the real vLLM engine (marker `engine`).

Each engine takes ~20 s to start; every test module shares the same few through
`shared_engine`, which the CLI uses too, so CLI tests reuse them as well.
"""

import pytest

from hsedit.engine.engine import EngineOptions, shared_engine

PLAIN = EngineOptions(drafter="none")
COPY = EngineOptions(drafter="ngram")


@pytest.fixture(scope="session")
def plain_engine():
    return shared_engine(PLAIN)


@pytest.fixture(scope="session")
def copy_engine():
    return shared_engine(COPY)
