"""Model names resolve to something vLLM can load, or to one clear error."""

import json

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


def test_a_drafter_knows_the_target_it_was_trained_for(tmp_path, monkeypatch):
    monkeypatch.setenv("HSEDIT_CACHE", str(tmp_path / "cache"))
    cached = provision.cache_dir() / "models" / "base-123-fp32-apply-lora-abcdef012345"
    cached.mkdir(parents=True)
    # a model in hsedit's cache is known by the cache's key: its directory's name
    assert provision.target_identity(str(cached)) == cached.name
    assert provision.target_identity("HuggingFaceTB/SmolLM2-360M-Instruct") == "HuggingFaceTB/SmolLM2-360M-Instruct"
    # another directory by its name and a digest of its config and weights
    other = tmp_path / "mine"
    other.mkdir()
    (other / "config.json").write_text('{"hidden_size": 8}')
    (other / "model.safetensors").write_bytes(b"\0" * 100)
    first = provision.target_identity(str(other))
    assert first.startswith("mine-") and provision.target_identity(str(other)) == first
    (other / "model.safetensors").write_bytes(b"\1" * 100)  # retrained weights: another target
    assert provision.target_identity(str(other)) != first
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps({"hsedit": {"target": cached.name}}))
    check = provision.drafter_target(str(drafter), str(cached))
    assert check.matches and check.warning() is None
    check = provision.drafter_target(str(drafter), str(other))
    assert not check.matches and cached.name in check.warning() and "hsedit drafter train" in check.warning()
    assert check.as_dict() == {"trained_for": cached.name, "target": provision.target_identity(str(other)), "matches": False}


def test_the_shipped_drafter_was_trained_for_the_shipped_target():
    """The release rule: a new apply adapter is a new target, and the drafter is retrained for it."""
    config = json.loads((provision.DEFAULT_DRAFTER / "config.json").read_text())
    assert config["hsedit"]["target"] == provision.embedded_target_identity(), (
        "the apply adapter changed: retrain the DSpark drafter (hsedit drafter train) and ship it"
    )
