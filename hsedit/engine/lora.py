"""Merging a LoRA adapter (peft's on-disk layout) into a model's weights, without peft.

W' = W + scale * B @ A for every adapted linear layer, scale = alpha / r (alpha / sqrt(r)
with rsLoRA) — what peft's merge_and_unload computes for plain LoRA.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hsedit.errors import ModelError

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PEFT_PREFIX = "base_model.model."


def merge_lora(state_dict: dict, adapter_dir: str | Path) -> int:
    """Add the adapter's low-rank updates into `state_dict` in place; return how many layers."""
    import torch
    from safetensors.torch import load_file

    adapter_dir = Path(adapter_dir)
    try:
        config = json.loads((adapter_dir / ADAPTER_CONFIG).read_text())
        weights = load_file(adapter_dir / ADAPTER_WEIGHTS)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the LoRA adapter in {adapter_dir}: {exc}") from exc
    if config.get("peft_type", "LORA") != "LORA" or config.get("use_dora") or config.get("fan_in_fan_out"):
        raise ModelError(f"unsupported adapter in {adapter_dir}: only plain LoRA merges here")
    rank, alpha = config["r"], config["lora_alpha"]
    scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    merged = 0
    for key, down in weights.items():
        if not key.endswith(".lora_A.weight"):
            continue
        module = key.removesuffix(".lora_A.weight").removeprefix(PEFT_PREFIX)
        up = weights[key.replace(".lora_A.", ".lora_B.")]
        target = state_dict.get(module + ".weight")
        if target is None:
            raise ModelError(f"the adapter adapts {module}, which the model does not have")
        with torch.no_grad():
            target += scale * (up.to(target.dtype) @ down.to(target.dtype))
        merged += 1
    if not merged:
        raise ModelError(f"the adapter in {adapter_dir} has no LoRA weights")
    return merged
