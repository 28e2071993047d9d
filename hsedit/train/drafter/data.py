"""Training data for the DSpark drafter: sequences the target wrote, with its hidden states.

A drafter learns to predict the target on the target's own outputs, so chat prompts are
answered by the target itself (greedy, on our engine). Edit examples use the generator's
expected outputs as the answer: the apply model reproduces them closely and they need no
generation. Features are the residual stream after each of the drafter's target layers
(what vLLM's auxiliary hidden-state outputs give at inference), computed with transformers.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from hsedit.drafting.dspark import DSparkConfig
from hsedit.errors import UsageError

MAX_PROMPT_TOKENS = 768
MAX_ANSWER_TOKENS = 256


@dataclass
class Sequence_:
    """One training sequence: tokens, where the loss applies, and the target's view of it."""

    input_ids: torch.Tensor  # [seq] long
    loss_mask: torch.Tensor  # [seq] bool: positions whose token the target wrote (the answer)
    features: torch.Tensor  # [seq, len(target_layer_ids) * hidden] bf16
    final_hidden: torch.Tensor  # [seq, hidden] bf16: the target's normed last hidden state
    kind: str  # "chat" or the edit kind


def read_prompts(paths: Sequence[str | Path], limit: int | None = None, seed: int = 0) -> list[str]:
    """First turns of JSON-lines prompt files ({"turns": [...]} or {"prompt": ...})."""
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise UsageError(f"no such prompt file: {missing[0]}")
    prompts = []
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            text = record["turns"][0] if "turns" in record else record["prompt"]
            prompts.append(str(text))
    random.Random(seed).shuffle(prompts)
    return prompts[:limit] if limit else prompts


def chat_sequences(engine, prompts: Sequence[str]) -> list[tuple[list[int], int, str]]:
    """(token ids, answer start, kind) for each prompt, answered greedily by the engine's target."""
    encoded = []
    for prompt in prompts:
        ids = engine.tokenizer.encode(engine.chat_prompt(prompt), add_special_tokens=False)
        if len(ids) <= MAX_PROMPT_TOKENS:
            encoded.append(ids)
    from hsedit.engine.engine import GenerationRequest

    results = engine.generate([GenerationRequest(ids, max_tokens=MAX_ANSWER_TOKENS) for ids in encoded])
    return [(ids + r.token_ids, len(ids), "chat") for ids, r in zip(encoded, results) if r.token_ids]


def edit_sequences(tokenizer, examples) -> list[tuple[list[int], int, str]]:
    from hsedit.train.finetune.train import encode_example

    out = []
    for example in examples:
        ids, labels = encode_example(tokenizer, example)
        start = next(i for i, label in enumerate(labels) if label != -100)
        if start <= MAX_PROMPT_TOKENS * 2 and len(ids) - start <= MAX_ANSWER_TOKENS * 3:
            out.append((ids, start, example.kind))
    return out


@torch.inference_mode()
def target_features(
    target_dir: str,
    cfg: DSparkConfig,
    sequences: Sequence[tuple[list[int], int, str]],
    log: Callable[[str], None] = print,
    device: str = "cpu",
) -> list[Sequence_]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).to(device).eval()
    out = []
    for n, (ids, start, kind) in enumerate(sequences):
        input_ids = torch.tensor(ids, dtype=torch.long)
        result = model(input_ids[None].to(device), output_hidden_states=True)
        # hidden_states[0] is the embedding output, [i + 1] the output of layer i.
        layers = [result.hidden_states[i + 1][0].cpu() for i in cfg.target_layer_ids]
        mask = torch.zeros(len(ids), dtype=torch.bool)
        mask[start:] = True
        out.append(
            Sequence_(
                input_ids=input_ids,
                loss_mask=mask,
                features=torch.cat(layers, dim=-1).to(torch.bfloat16),
                final_hidden=result.hidden_states[-1][0].to(torch.bfloat16).cpu(),
                kind=kind,
            )
        )
        if (n + 1) % 50 == 0:
            log(f"target features: {n + 1}/{len(sequences)} sequences")
    return out


def target_weights(target_dir: str) -> dict[str, torch.Tensor]:
    """The target's weights by name (fp32): shared embeddings, and a starting point for the drafter."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state.setdefault("lm_head.weight", model.get_output_embeddings().weight.detach().clone())
    return state
