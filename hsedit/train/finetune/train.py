"""LoRA fine-tuning of the apply model on generated edits (CPU here; the same recipe on a GPU).

The loss covers only the answer (the rewritten file and its closing fence); the prompt is
rendered by the same code inference uses, so the model learns exactly the format it will see.

With a checkpoint directory, training accumulates across runs: each run resumes the last one's
adapter, optimizer, place in the data and random state, and saves them again every few minutes
and when it stops (a time budget, Ctrl-C, the data used up), so a budget spread over many short
background runs trains as one long run would. Its learning rate then decays over a planned
number of tokens in all runs together (`budget_tokens`), not over one run's time.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from hsedit.edit.prompt import CLOSING_FENCE, ApplyPrompt, completion_for
from hsedit.errors import UsageError
from hsedit.niceness import yield_like_niceness
from hsedit.train.checkpoint import STATE_FILE, StopRequest, load_state, replace_directory, shuffled_pass
from hsedit.train.finetune.dataset import Example, load

TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
END_OF_TURN = "<|im_end|>"


@dataclass
class TrainConfig:
    data: str
    base_model: str  # an HF directory (the provisioned base)
    output: str  # adapter directory
    rank: int = 16
    alpha: int | None = None  # LoRA's scale numerator; None: 2 x rank (the usual choice)
    learning_rate: float = 4e-4
    epochs: float = 1.0
    accumulation: int = 4
    max_tokens: int = 1024  # longer examples are skipped
    time_budget_s: float | None = None  # stop (and save) when exceeded
    warmup_steps: int = 10
    seed: int = 0
    threads: int | None = None
    # Continue this adapter (same rank and modules) instead of starting a new one: a short run on
    # new data then adds to what the adapter already does instead of relearning the format.
    init_adapter: str | None = None
    # bf16 autocast: 1.5x the fp32 speed on a CPU with AVX-512 BF16 (205 vs 135 tok/s, 2 cores,
    # 2,000-token examples); the weights and the optimizer stay fp32.
    bf16: bool = False
    # Resume from, and save to, this directory (adapter, optimizer, data position, RNG).
    checkpoint: str | None = None
    checkpoint_every_s: float = 600.0
    # With a checkpoint: the learning rate decays linearly to 10% over this many tokens, counted
    # over every run (None: constant after warm-up).
    budget_tokens: int | None = None
    stop_after_examples: int | None = None  # this run only (tests, and a run sized by examples)
    device: str = "cpu"  # "cuda" on a lent GPU (hsedit/train/gpu_recipe.py)
    # The loss weight of the answer's tokens on lines the edit changes, and of the first
    # RESUME_TOKENS after each change (where copying resumes), against 1 for the copied rest:
    # an answer is mostly copied lines, so an unweighted loss mostly rewards copying.
    changed_weight: float = 1.0
    # The loss weight (in answer tokens) of each wrong turn's unlikelihood, -log(1 - p(wrong)):
    # where the edit departs from the original, the original's own next token (copying on is
    # how an answer comes back unchanged), and at each line start of the answer the closing fence
    # (an answer cut after its first lines). 0: plain cross-entropy.
    wrong_turn_weight: float = 0.0
    # The loss weight of the answer's own closing fence. The wrong turns push the fence down at
    # every other line start, many times an answer; this is the one place it must be written, and
    # an answer that misses it runs on until it is cut off.
    end_weight: float = 1.0
    # A pure insertion's departure weighs this share of a wrong turn (0: none). There the
    # original's next token (a signature's `)` after its last parameter) is the token the answer
    # writes right after the inserted text, and one the file writes in the same context everywhere
    # else: pushed down at full weight, answers learn to run on past the insertion.
    insertion_turn_share: float = 1.0


FLOOR = 0.1  # share of the peak learning rate a budgeted schedule ends at
RESUME_TOKENS = 4


def encode_example(tokenizer, example: Example) -> tuple[list[int], list[int]]:
    """(input ids, labels) with the prompt masked out (-100)."""
    ids, labels, _ = encode_weighted(tokenizer, example)
    return ids, labels


def encode_weighted(tokenizer, example: Example, changed_weight: float = 1.0,
                    end_weight: float = 1.0) -> tuple[list[int], list[int], list[float]]:
    """(input ids, labels, loss weights): the prompt masked out (-100, weight 0); the answer's
    tokens that overlap a line the edit changed, and the RESUME_TOKENS after each such run,
    weighted `changed_weight`; the tokens of the closing fence `end_weight`; the others 1."""
    prompt = ApplyPrompt.build(example.path, example.before, example.instruction, example.update)
    prompt_ids = tokenizer.encode(prompt.render(tokenizer))
    # Tokenised apart, as at inference, where the prompt is encoded alone and the model continues.
    completion = completion_for(example.after)
    answer = completion + END_OF_TURN
    encoded = tokenizer(answer, add_special_tokens=False, return_offsets_mapping=True)
    answer_ids = list(encoded["input_ids"])
    weights = [1.0] * len(answer_ids)
    if changed_weight != 1.0:
        spans = changed_spans(example.before, example.after)
        since_change = RESUME_TOKENS + 1
        for k, (a, b) in enumerate(encoded["offset_mapping"]):
            if any(a < end and start < max(b, a + 1) for start, end in spans):
                weights[k], since_change = changed_weight, 0
            elif since_change < RESUME_TOKENS:
                weights[k], since_change = changed_weight, since_change + 1
    if end_weight != 1.0:
        fence_start, fence_end = len(completion) - len(CLOSING_FENCE), len(completion)
        for k, (a, b) in enumerate(encoded["offset_mapping"]):
            if a < fence_end and fence_start < b:
                weights[k] = end_weight
    return prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids, [0.0] * len(prompt_ids) + weights


def wrong_turns(tokenizer, example: Example, answer_ids: list[int],
                insertion_share: float = 1.0) -> list[tuple[int, int, float]]:
    """(answer position, token, share of a wrong turn's weight) triples: the tokens an answer must
    not write where it has an easy way out. Where the edit departs from the original (its answer
    tokenised as the original would be, aligned token by token), the original's own next token,
    at `insertion_share` where the answer only inserts tokens (none at 0); at every other line
    start of the answer, the closing fence."""
    import difflib

    original = tokenizer(completion_for(example.before) + END_OF_TURN, add_special_tokens=False)["input_ids"]
    turns: dict[int, tuple[int, float]] = {}
    matcher = difflib.SequenceMatcher(a=original, b=answer_ids, autojunk=False)
    for tag, i1, _i2, j1, _j2 in matcher.get_opcodes():
        share = insertion_share if tag == "insert" else 1.0
        if tag != "equal" and share and i1 < len(original) and j1 < len(answer_ids) and original[i1] != answer_ids[j1]:
            turns[j1] = (original[i1], share)
    fence = tokenizer("\n" + CLOSING_FENCE, add_special_tokens=False)["input_ids"][-1]
    if tokenizer.decode([fence]) == CLOSING_FENCE:
        ends_line = {token: tokenizer.decode([token]).endswith("\n") for token in set(answer_ids)}
        for k in range(len(answer_ids)):  # the answer itself starts a line (the prompt ends the fence's)
            if (k == 0 or ends_line[answer_ids[k - 1]]) and answer_ids[k] != fence:
                turns.setdefault(k, (fence, 1.0))
    return [(k, token, share) for k, (token, share) in sorted(turns.items())]


def changed_spans(before: str, after: str) -> list[tuple[int, int]]:
    """Character spans of `after` on lines that are not lines of `before` kept in place."""
    import difflib

    lines = after.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    spans = []
    matcher = difflib.SequenceMatcher(a=before.splitlines(keepends=True), b=lines, autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert") and j2 > j1:
            spans.append((offsets[j1], offsets[j2]))
    return spans


def train(config: TrainConfig, log: Callable[[str], None] = print) -> dict:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if config.init_adapter and not (Path(config.init_adapter) / "adapter_config.json").is_file():
        raise UsageError(f"not a LoRA adapter directory (no adapter_config.json): {config.init_adapter}")
    if yield_like_niceness():  # a background run yields to the user's engine (hsedit/niceness.py)
        log(f"niceness {os.nice(0)} given to this session's scheduling group (autogroup)")
    torch.manual_seed(config.seed)
    if config.threads:
        torch.set_num_threads(config.threads)
    tokenizer = AutoTokenizer.from_pretrained(config.base_model)
    model = AutoModelForCausalLM.from_pretrained(config.base_model, dtype=torch.float32)
    data_id = _file_sha256(config.data) + f":{config.max_tokens}" + (
        f":w{config.changed_weight:g}" if config.changed_weight != 1.0 else "") + (
        f":t{config.wrong_turn_weight:g}" if config.wrong_turn_weight else "") + (
        f":e{config.end_weight:g}" if config.end_weight != 1.0 else "") + (
        f":i{config.insertion_turn_share:g}" if config.wrong_turn_weight and config.insertion_turn_share != 1.0 else "")
    resumed = load_state(config.checkpoint, data_id, "the same --data and --max-tokens")
    if resumed is not None:
        model = PeftModel.from_pretrained(model, str(Path(config.checkpoint) / "adapter"), is_trainable=True)
    elif config.init_adapter:
        model = PeftModel.from_pretrained(model, config.init_adapter, is_trainable=True)
    else:
        model = get_peft_model(
            model,
            LoraConfig(
                r=config.rank,
                lora_alpha=config.alpha if config.alpha is not None else 2 * config.rank,
                lora_dropout=0.0,
                target_modules=list(TARGET_MODULES),
                task_type="CAUSAL_LM",
            ),
        )
    model.to(config.device).train()
    device_type = torch.device(config.device).type
    examples = load(config.data, split="train")
    encoded = []  # (ids, labels, weights, wrong turns) of each example that fits
    for example in examples:
        ids, labels, weights = encode_weighted(tokenizer, example, config.changed_weight, config.end_weight)
        if len(ids) > config.max_tokens:
            continue
        turns = []
        if config.wrong_turn_weight:
            start = labels.count(-100)  # the prompt's length
            turns = [(start + k, token, share) for k, token, share in wrong_turns(tokenizer, example, ids[start:], config.insertion_turn_share)]
        encoded.append((ids, labels, weights, turns))
    rng = random.Random(config.seed)
    order = []
    for _ in range(math.ceil(config.epochs)):
        order += shuffled_pass(rng, len(encoded))
    order = order[: int(len(encoded) * config.epochs)]
    total_updates = max(1, len(order) // config.accumulation)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    position, update, tokens_before = 0, 0, 0
    if resumed is not None:
        order, position, update, tokens_before = resumed["order"], resumed["position"], resumed["update"], resumed["tokens_total"]
        optimizer.load_state_dict(resumed["optimizer"])
        rng.setstate(resumed["python_rng"])
        torch.set_rng_state(resumed["torch_rng"])
        log(f"resumed {config.checkpoint}: example {position}/{len(order)}, {tokens_before} tokens seen in all")
    if config.checkpoint:
        # Runs accumulate without end: a run that starts with less than one update's worth of
        # data left (none, or a group a stop cut short) goes on into another shuffled pass.
        if len(order) - position < config.accumulation:
            order = order + shuffled_pass(rng, len(encoded))

    started = time.time()
    last_saved = started

    def lr_at(update: int) -> float:
        if update < config.warmup_steps:
            return config.learning_rate * (update + 1) / config.warmup_steps
        if config.checkpoint:  # runs accumulate: no single run's end to decay to
            if not config.budget_tokens:
                return config.learning_rate
            done = (tokens_before + tokens_seen) / config.budget_tokens
            return config.learning_rate * max(FLOOR, 1 - (1 - FLOOR) * done)
        # Linear decay to zero at the end of the data or of the time budget, whichever comes first.
        done = update / total_updates
        if config.time_budget_s:
            done = max(done, (time.time() - started) / config.time_budget_s)
        return config.learning_rate * max(0.0, 1 - done)

    tokens_seen, running = 0, []
    stopped_early = False
    i = position - 1
    stop_requested = StopRequest(enabled=bool(config.checkpoint))

    # Where the last optimizer update left the data: a stop between updates resumes from here
    # (the half-accumulated gradient is dropped, those examples are seen again next run).
    at_last_update = (position, 0)

    def save_checkpoint() -> None:
        next_example, tokens = at_last_update
        _save_state(config.checkpoint, model, {
            "data": data_id, "order": order, "position": next_example, "update": update,
            "tokens_total": tokens_before + tokens, "optimizer": optimizer.state_dict(),
            "python_rng": rng.getstate(), "torch_rng": torch.get_rng_state(),
        })

    for i in range(position, len(order)):
        ids, labels, weights, turns = encoded[order[i]]
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=config.bf16):
            logits = model(input_ids=torch.tensor([ids], device=config.device)).logits
        loss = weighted_loss(logits[0].float(), torch.tensor(labels, device=config.device),
                             torch.tensor(weights, device=config.device), turns, config.wrong_turn_weight)
        (loss / config.accumulation).backward()
        tokens_seen += len(ids)
        running.append(loss.item())
        if (i + 1) % config.accumulation == 0:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(update)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            update += 1
            at_last_update = (i + 1, tokens_seen)
            if config.checkpoint and time.time() - last_saved > config.checkpoint_every_s:
                save_checkpoint()  # only between updates: no half-accumulated gradient is lost
                last_saved = time.time()
        if (i + 1) % 20 == 0:
            elapsed = time.time() - started
            log(
                f"example {i + 1}/{len(order)} loss {sum(running) / len(running):.4f} "
                f"{tokens_seen / elapsed:.0f} tok/s {elapsed / 60:.1f} min"
            )
            running = []
        at_update = (i + 1) % config.accumulation == 0
        if config.time_budget_s and time.time() - started > config.time_budget_s and (at_update or not config.checkpoint):
            stopped_early = True
            log(f"time budget reached after {i + 1} examples")
            break
        if config.stop_after_examples and i + 1 - position >= config.stop_after_examples and at_update:
            stopped_early = True
            break
        if stop_requested.signal:
            stopped_early = True
            log(f"{stop_requested.signal} received: saving the checkpoint at example {at_last_update[0]}")
            break
    stop_requested.restore()
    if config.checkpoint:
        save_checkpoint()
    out_dir = Path(config.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    summary = {
        "config": asdict(config),
        "examples_seen": i + 1 - position,
        "tokens_total": tokens_before + tokens_seen,  # over every run of this checkpoint
        "examples_available": len(encoded),
        "tokens_seen": tokens_seen,
        "minutes": round((time.time() - started) / 60, 2),
        "stopped_early": stopped_early,
    }
    (out_dir / "training.json").write_text(json.dumps(summary, indent=1))
    return summary


def weighted_loss(logits, labels, weights, turns=(), turn_weight: float = 0.0):
    """The next-token cross-entropy's weighted mean (position t predicts label t + 1); with every
    weight 1 on the answer it is the mean cross-entropy the model's own loss computes. Each wrong
    turn (position in the sequence, token, share) adds -log(1 - p(token)) there, weighing
    `turn_weight` x share answer tokens in the mean."""
    import torch

    losses = torch.nn.functional.cross_entropy(logits[:-1], labels[1:], ignore_index=-100, reduction="none")
    w = weights[1:] * (labels[1:] != -100)
    total, count = (losses * w).sum(), w.sum()
    if turns and turn_weight:
        at = torch.tensor([position - 1 for position, _, _ in turns], device=logits.device)  # [turns]
        wrong = torch.tensor([token for _, token, _ in turns], device=logits.device)  # [turns]
        share = torch.tensor([share for _, _, share in turns], device=logits.device)  # [turns]
        p_wrong = torch.log_softmax(logits[at], dim=-1).gather(1, wrong[:, None])[:, 0].exp()
        total = total + turn_weight * (share * -torch.log1p(-p_wrong.clamp(max=1 - 1e-6))).sum()
        count = count + turn_weight * share.sum()
    return total / count.clamp(min=1e-6)


def _file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _save_state(checkpoint: str, model, state: dict) -> None:
    """Write the checkpoint beside the old one, then swap: a crash leaves one whole checkpoint."""
    import torch

    def write(staging: Path) -> None:
        model.save_pretrained(staging / "adapter")
        torch.save(state, staging / STATE_FILE)
        (staging / "progress.json").write_text(json.dumps(
            {"tokens_total": state["tokens_total"], "position": state["position"], "examples": len(state["order"]),
             "update": state["update"], "saved_at": time.time()}, indent=1))

    replace_directory(checkpoint, write)
