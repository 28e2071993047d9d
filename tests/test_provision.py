"""Model names resolve to something vLLM can load, or to one clear error."""

import pytest

from hsedit.engine import provision
from hsedit.errors import ModelError


def test_bad_model_names_are_one_line_errors(tmp_path):
    with pytest.raises(ModelError, match="model file not found"):
        provision.resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelError, match="no config.json"):
        provision.resolve_model(str(tmp_path))
    with pytest.raises(ModelError, match="model not found"):
        provision.resolve_model("no-such-model")


def test_hf_directories_and_hub_ids_pass_through(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert provision.resolve_model(str(tmp_path)) == str(tmp_path.resolve())
    assert provision.resolve_model("HuggingFaceTB/SmolLM2-360M-Instruct") == "HuggingFaceTB/SmolLM2-360M-Instruct"


def test_missing_adapter_is_reported(tmp_path):
    with pytest.raises(ModelError, match="apply adapter is missing"):
        provision.merged_model(tmp_path, tmp_path / "no-adapter")


def test_the_apply_adapter_ships_within_the_size_limit():
    weights = provision.DEFAULT_ADAPTER / "adapter_model.safetensors"
    assert weights.is_file()
    assert weights.stat().st_size <= 25 * 1024 * 1024


def test_cache_is_built_atomically(tmp_path, monkeypatch):
    monkeypatch.setenv("HSEDIT_CACHE", str(tmp_path))
    target = tmp_path / "models" / "thing"

    def failing_build(staging):
        (staging / "partial").write_text("half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        provision._cache_atomically(target, failing_build, {})
    assert not target.exists() and list((tmp_path / "models").iterdir()) == []
    provision._cache_atomically(target, lambda staging: (staging / "w").write_text("ok"), {"a": 1})
    assert (target / provision.MARKER).is_file() and (target / "w").read_text() == "ok"
