"""The adapter over vLLM's model runner refuses a vLLM it was not written for, in one line."""

import pytest

from hsedit.engine import vllm_runner


def test_another_vllm_is_refused_in_one_line(monkeypatch):
    import vllm

    vllm_runner.check_vllm_version()  # the installed one is supported
    monkeypatch.setattr(vllm, "__version__", "0.40.1")
    with pytest.raises(RuntimeError, match=r"written for vLLM 0\.32, not 0\.40\.1") as refused:
        vllm_runner.check_vllm_version()
    assert "\n" not in str(refused.value)
