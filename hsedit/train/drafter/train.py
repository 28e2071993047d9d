"""Train a DSpark drafter for a target: data, DeepSpec's loss, STS calibration, evaluation.

Loss per drafted position k (weights exp(-(k-1)/4)): 0.1 * cross-entropy to the next token
+ 0.9 * ||p_draft - p_target||_1 + BCE(c_k, 1 - 0.5 * ||p_draft - p_target||_1).
The embeddings and LM head are the target's, frozen and not stored.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from hsedit.drafting.calibration import auc, ece, fit_sts, log_loss, survival_from_logits
from hsedit.drafting.dspark import DSparkConfig, DSparkDrafter, draft_position_weights, save_drafter
from hsedit.errors import UsageError
from hsedit.train.checkpoint import STATE_FILE, StopRequest, load_state, replace_directory, shuffled_pass
from hsedit.train.drafter.data import Sequence_

# DeepSpec's weights. A short run may raise the cross-entropy share (`ce_weight`): while the
# draft and target distributions barely overlap, the L1 term's gradient is small.
CE_WEIGHT, L1_WEIGHT, CONFIDENCE_WEIGHT = 0.1, 0.9, 1.0


@dataclass
class DrafterTrainConfig:
    target: str | None = None  # model name as --model takes it; None: the default apply model
    output: str = "drafter"
    corpus: list[str] = field(default_factory=list)  # JSON-lines prompt files, answered by the target
    max_prompts: int = 400
    general_prompts: int = 0  # our own general chat prompts (drafter/prompts.py), answered by the target
    edit_examples: int = 200  # generated edit examples (train split only)
    minutes: float = 60.0
    max_steps: int | None = None  # stop earlier after this many updates
    ce_weight: float = CE_WEIGHT  # L1 gets 1 - ce_weight
    learning_rate: float = 1e-3
    anchors: int = 24  # blocks per sequence per update
    draft_layers: int = 1
    markov_rank: int = 32
    anchor_feature: bool = False  # EAGLE's input for the anchor row (DSparkConfig.anchor_feature)
    draft_vocab: int = 0  # draft among this many tokens, the training answers' most frequent (0: all)
    device: str = "cpu"  # where updates run ("cuda" on a lent GPU); evaluation runs on the CPU
    heldout_fraction: float = 0.1
    seed: int = 0
    data_cache: str | None = None  # where prepared sequences are kept between runs
    # Resume from, and save to, this directory (weights, optimizer, data position, RNG): each run
    # continues the last instead of starting over, and a SIGTERM saves before it stops.
    checkpoint: str | None = None
    checkpoint_every_s: float = 600.0
    # With a checkpoint: the learning rate decays linearly to 5% over this many updates, counted
    # over every run (without: over this run's time budget).
    budget_updates: int | None = None
    # Start from this drafter's weights (same shape) instead of random ones: a drafter trained on
    # other data keeps what it learnt (a checkpoint cannot change its data; this can).
    init_drafter: str | None = None


# -- loss -----------------------------------------------------------------------------------
def sample_anchors(seq: Sequence_, count: int, rng: torch.Generator | None = None) -> torch.Tensor:
    """Anchor positions whose first drafted token lies in the answer, sorted."""
    valid = torch.nonzero(seq.loss_mask[1:]).squeeze(1)  # p such that token p + 1 is an answer token
    if len(valid) > count:
        valid = valid[torch.randperm(len(valid), generator=rng)[:count]].sort().values
    return valid


def block_mask(seq: Sequence_, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """[blocks, L] True while the k-th drafted token exists and is an answer token (a prefix)."""
    positions = anchors[:, None] + 1 + torch.arange(block_size, device=anchors.device)
    inside = positions < len(seq.input_ids)
    ok = inside & seq.loss_mask[positions.clamp(max=len(seq.input_ids) - 1)]
    return ok.int().cumprod(dim=1).bool()


def target_logits(model: DSparkDrafter, seq: Sequence_, anchors: torch.Tensor) -> torch.Tensor:
    """The target's logits at the positions that predict each block's tokens: [blocks, L, vocab]."""
    offsets = torch.arange(model.config.block_size, device=anchors.device)
    positions = (anchors[:, None] + offsets).clamp(max=len(seq.input_ids) - 1)
    return model.lm_head(seq.final_hidden[positions].float())


def dspark_loss(
    model: DSparkDrafter, seq: Sequence_, anchors: torch.Tensor, ce_weight: float = CE_WEIGHT
) -> tuple[torch.Tensor, dict]:
    cfg = model.config
    logits, hidden, prev = model.training_blocks(seq.input_ids, seq.features.float(), anchors)
    mask = block_mask(seq, anchors, cfg.block_size)
    weights = draft_position_weights(cfg.block_size).to(mask.device)[None, :] * mask
    with torch.no_grad():
        p_target = torch.softmax(target_logits(model, seq, anchors), dim=-1)
    p_draft = torch.softmax(logits.float(), dim=-1)
    l1 = (p_draft - p_target).abs().sum(-1)  # [blocks, L]
    positions = (anchors[:, None] + 1 + torch.arange(cfg.block_size, device=anchors.device)).clamp(max=len(seq.input_ids) - 1)
    ce = F.cross_entropy(logits.flatten(0, 1).float(), seq.input_ids[positions].flatten(), reduction="none")
    total_weight = weights.sum().clamp(min=1e-6)
    loss = (ce_weight * ce.view_as(l1) + (1.0 - ce_weight) * l1) * weights
    accept_rate = (1.0 - 0.5 * l1).clamp(0, 1).detach()
    if model.confidence_head is not None:
        conf = model.confidence_logits(hidden, prev)
        bce = F.binary_cross_entropy_with_logits(conf.float(), accept_rate, reduction="none")
        loss = loss + CONFIDENCE_WEIGHT * bce * weights
    stats = {
        "l1": float((l1 * weights).sum().detach() / total_weight),
        "accept@1": float((accept_rate[:, 0] * mask[:, 0]).sum() / mask[:, 0].sum().clamp(min=1)),
    }
    return loss.sum() / total_weight, stats


# -- calibration data -----------------------------------------------------------------------
def scored_anchors(sequences: Sequence[Sequence_], anchors_per_seq: int = 64) -> Iterator[tuple[Sequence_, torch.Tensor]]:
    """(sequence, anchors) of every held-out sequence with anchors, the same on every call:
    what the drafter and the bigram baseline are both scored at."""
    generator = torch.Generator().manual_seed(1)
    for seq in sequences:
        anchors = sample_anchors(seq, anchors_per_seq, generator)
        if len(anchors):
            yield seq, anchors


@torch.inference_mode()
def greedy_blocks(model: DSparkDrafter, sequences: Sequence[Sequence_], anchors_per_seq: int = 64):
    """Drafts as inference makes them (greedy, the Markov head fed its own tokens), judged
    against the target's greedy choice: returns confidence logits, accepted, valid, each [n, L]."""
    cfg = model.config
    all_logits, all_accepted, all_valid = [], [], []
    for seq, anchors in scored_anchors(sequences, anchors_per_seq):
        _, hidden, _ = model.training_blocks(seq.input_ids, seq.features.float(), anchors)
        target_choice = target_logits(model, seq, anchors).argmax(-1)
        tokens, prevs = model.greedy_chain(model.draft_logits(hidden), seq.input_ids[anchors])
        conf = model.confidence_logits(hidden, prevs).float()
        all_logits.append(conf.numpy())
        all_accepted.append((tokens == target_choice).numpy())
        all_valid.append(block_mask(seq, anchors, cfg.block_size).numpy())
    return np.concatenate(all_logits), np.concatenate(all_accepted), np.concatenate(all_valid)


def acceptance_summary(accepted: np.ndarray, valid: np.ndarray) -> dict:
    """accept@1 (the first draft token is the target's choice) and draft tokens accepted per block."""
    rows = valid.astype(bool)
    survived = np.cumprod(accepted, axis=1).astype(bool) & rows
    first = rows[:, 0]
    return {"accept@1": round(float(accepted[first, 0].mean()) if first.any() else 0.0, 4),
            "accepted_per_block": round(float(survived.sum(1).mean()) if len(rows) else 0.0, 4)}


def bigram_blocks(
    train: Sequence[Sequence_],
    heldout: Sequence[Sequence_],
    block_size: int,
    target_choice: Callable[[Sequence_, torch.Tensor], torch.Tensor],
    anchors_per_seq: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """The baseline a drafter that ignores the target's features must beat: from each anchor,
    the next token most often seen after the last one in the training answers, chained.
    Scored at the drafter's anchors (`scored_anchors`) against the target's choices there;
    (accepted, valid)."""
    following: dict[int, Counter] = {}
    for seq in train:
        ids, mask = seq.input_ids.tolist(), seq.loss_mask.tolist()
        for t in range(len(ids) - 1):
            if mask[t + 1]:
                following.setdefault(ids[t], Counter())[ids[t + 1]] += 1
    best = {token: counts.most_common(1)[0][0] for token, counts in following.items()}
    accepted, valid = [], []
    for seq, anchors in scored_anchors(heldout, anchors_per_seq):
        choices = target_choice(seq, anchors)  # [blocks, L]
        chains = []
        for anchor in seq.input_ids[anchors].tolist():
            chain, token = [], anchor
            for _ in range(block_size):
                token = best.get(token, -1)
                chain.append(token)
            chains.append(chain)
        accepted.append((torch.tensor(chains) == choices).numpy())
        valid.append(block_mask(seq, anchors, block_size).numpy())
    return np.concatenate(accepted), np.concatenate(valid)


@torch.inference_mode()
def feature_ablation(
    model: DSparkDrafter,
    train: Sequence[Sequence_],
    heldout: Sequence[Sequence_],
    real: tuple[np.ndarray, np.ndarray],
) -> dict:
    """What limits the drafter, measured: held-out accept@1 and accepted tokens per block with the
    target's real features (`real`: greedy_blocks' accepted and valid, already computed), with
    them zeroed, shifted one position late, and taken from another held-out sequence; and the
    bigram baseline. If the context barely matters, the drafter is not using it."""
    def other(i: int, seq: Sequence_) -> torch.Tensor:
        donor = heldout[(i + 1) % len(heldout)].features
        rows = torch.zeros_like(seq.features)
        rows[: min(len(donor), len(rows))] = donor[: len(rows)]
        return rows

    variants = {
        "zeroed": lambda i, seq: torch.zeros_like(seq.features),
        "shifted": lambda i, seq: torch.cat([torch.zeros_like(seq.features[:1]), seq.features[:-1]]),
        "other_sequence": other,
    }
    report = {"real": acceptance_summary(*real)}
    for name, features in variants.items():
        changed = [replace(seq, features=features(i, seq)) for i, seq in enumerate(heldout)]
        _, accepted, valid = greedy_blocks(model, changed)
        report[name] = acceptance_summary(accepted, valid)
    choice = lambda seq, anchors: target_logits(model, seq, anchors).argmax(-1)  # noqa: E731
    report["bigram"] = acceptance_summary(*bigram_blocks(train, heldout, model.config.block_size, choice))
    return report


def calibration_report(logits, accepted, valid, temperatures) -> dict:
    """Per-position acceptance, mean accepted per block, ECE/AUC/log-loss of cumulative survival."""
    survived = np.cumprod(accepted, axis=1).astype(bool)
    survival = survival_from_logits(logits, temperatures)
    rows = valid.astype(bool)
    per_position = []
    for k in range(accepted.shape[1]):
        reached = rows[:, k] & (survived[:, k - 1] if k else True)
        per_position.append(float(accepted[reached, k].mean()) if reached.any() else float("nan"))
    return {
        "blocks": len(logits),
        "acceptance_by_position": per_position,
        "mean_accepted_per_block": float((survived & rows).sum(1).mean()),
        "predicted_accepted_per_block": float((survival * rows).sum(1).mean()),
        "survival_ece": ece(survival[rows], survived[rows]),
        "survival_auc": auc(survival[rows], survived[rows]),
        "survival_log_loss": log_loss(survival[rows], survived[rows]),
    }


# -- the loop -------------------------------------------------------------------------------
def train_drafter(
    cfg: DSparkConfig,
    target: dict[str, torch.Tensor],
    train: Sequence[Sequence_],
    heldout: Sequence[Sequence_],
    config: DrafterTrainConfig,
    log: Callable[[str], None] = print,
) -> tuple[DSparkDrafter, dict]:
    torch.manual_seed(config.seed)
    model = DSparkDrafter(cfg)
    embed = target.get("model.embed_tokens.weight")
    model.share_target_embeddings(embed, target.get("lm_head.weight", embed))
    model.to(config.device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.0)
    budget = config.minutes * 60.0
    started = time.monotonic()
    rng = random.Random(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    data_id = sequences_id(train)
    state = load_state(config.checkpoint, data_id, "the same target and data options")
    shape = drafter_shape(cfg)
    if state is not None and state.get("shape", shape) != shape:
        raise UsageError(f"{config.checkpoint} holds a drafter of another shape ({state['shape']}): resume it "
                         "with the same --draft-layers, --markov-rank and --anchor-feature, or give a new --checkpoint")
    init = None
    if state is None:
        order, position, step, blocks, history, running = shuffled_pass(rng, len(train)), 0, 0, 0, [], {}
        if config.init_drafter:
            init = start_from(model, config.init_drafter, shape)
            log(f"starting from {config.init_drafter} ({init['steps']} updates, {init['blocks_total']} blocks)")
    else:
        model.load_state_dict(state["model"], strict=False)  # the shared embeddings are the target's
        optimizer.load_state_dict(state["optimizer"])
        order, position, step, blocks = state["order"], state["position"], state["step"], state["blocks"]
        history, running, init = state["history"], state["running"], state.get("init")
        rng.setstate(state["rng"])
        generator.set_state(state["generator"])
        log(f"resumed {config.checkpoint}: update {step}, {blocks} blocks seen in all")
    warmup, steps_before = 30, step
    stop = StopRequest(enabled=bool(config.checkpoint))
    last_saved = time.monotonic()

    def save() -> None:
        save_checkpoint(config.checkpoint, {
            "model": model.own_state_dict(), "optimizer": optimizer.state_dict(), "order": order,
            "position": position, "step": step, "blocks": blocks, "history": history, "running": running,
            "rng": rng.getstate(), "generator": generator.get_state(), "data": data_id, "shape": shape,
            "init": init,
        })

    try:
        while True:
            elapsed = time.monotonic() - started
            if elapsed >= budget or (config.max_steps is not None and step - steps_before >= config.max_steps):
                break
            if stop.signal:
                log(f"{stop.signal} received: saving the checkpoint at update {step}")
                break
            if position >= len(order):  # the next pass over the data
                order, position = shuffled_pass(rng, len(train)), 0
            seq = train[order[position]]
            position += 1
            anchors = sample_anchors(seq, config.anchors, generator)
            if not len(anchors):
                continue
            # Linear warm-up, then a linear decay: over the updates of every run when they
            # accumulate in a checkpoint, else over this run's time budget.
            if config.checkpoint and config.budget_updates:
                progress = step / config.budget_updates
            else:
                progress = elapsed / budget
            scale = min(1.0, (step + 1) / warmup) * max(0.05, 1.0 - progress)
            for group in optimizer.param_groups:
                group["lr"] = config.learning_rate * scale
            if config.device != "cpu":
                seq = replace(seq, **{f: getattr(seq, f).to(config.device)
                                      for f in ("input_ids", "loss_mask", "features", "final_hidden")})
                anchors = anchors.to(config.device)
            loss, stats = dspark_loss(model, seq, anchors, config.ce_weight)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            step += 1
            blocks += len(anchors)
            for key, value in {"loss": loss.item(), **stats}.items():
                running[key] = 0.98 * running.get(key, value) + 0.02 * value
            if step % 50 == 0:
                history.append({"step": step, "minutes": round(elapsed / 60, 2), **running})
                log(f"step {step} ({elapsed / 60:.1f} min): " + ", ".join(f"{k} {v:.3f}" for k, v in running.items()))
            if config.checkpoint and time.monotonic() - last_saved > config.checkpoint_every_s:
                save()
                last_saved = time.monotonic()
    finally:
        stop.restore()
    if config.checkpoint:
        save()
    model.to("cpu").eval()
    if config.draft_vocab:  # chosen after training: it changes how the drafter drafts, not its weights
        model = with_draft_vocab(model, frequent_tokens(train, config.draft_vocab, cfg.vocab_size))
        cfg = model.config
    logits, accepted, valid = greedy_blocks(model, heldout)
    half = len(logits) // 2  # fit STS on one half of the held-out blocks, report on the other
    survived = np.cumprod(accepted, axis=1)
    temperatures = fit_sts(logits[:half], survived[:half], valid[:half])
    ones = np.ones(cfg.block_size)
    ablation = feature_ablation(model, train, heldout, real=(accepted, valid))
    log("held out, accept@1 / accepted per block: " + "; ".join(
        f"{name} {r['accept@1']:.3f} / {r['accepted_per_block']:.2f}" for name, r in ablation.items()))
    report = {
        "ablation": ablation,
        "steps": step,  # over every run of the checkpoint
        "blocks_total": blocks,
        # The drafter this one started from, and the blocks seen counting its training too.
        "init": init,
        "blocks_all_runs": blocks + (init["blocks_all_runs"] if init else 0),
        "minutes": round((time.monotonic() - started) / 60, 1),
        "train_sequences": len(train),
        "heldout_sequences": len(heldout),
        "sts_temperatures": temperatures.round(4).tolist(),
        "before_sts": calibration_report(logits[half:], accepted[half:], valid[half:], ones),
        "after_sts": calibration_report(logits[half:], accepted[half:], valid[half:], temperatures),
        "history": history,
        "config": {k: v for k, v in asdict(config).items()},
    }
    rows = valid.astype(bool)
    expected = [float((survived[:, k] * rows[:, k]).sum() / max(1, rows[:, k].sum())) for k in range(cfg.block_size)]
    calibrated = DSparkConfig(**{
        **asdict(cfg),
        "sts_temperatures": tuple(float(t) for t in temperatures),
        "expected_survival": tuple(round(a, 4) for a in expected),
    })
    model.config = calibrated
    model.sts_temperatures = torch.tensor(temperatures, dtype=torch.float32)
    return model, report


def drafter_shape(cfg: DSparkConfig) -> dict:
    """What a checkpoint's weights mean: the config without what training fits at the end."""
    fitted_at_the_end = ("sts_temperatures", "expected_survival", "target", "draft_vocab_size")
    return {k: v for k, v in asdict(cfg).items() if k not in fitted_at_the_end}


def frequent_tokens(sequences: Sequence[Sequence_], count: int, vocab_size: int) -> torch.Tensor:
    """The `count` tokens the target writes most often in these answers, most frequent first,
    filled up with the lowest ids not among them (a BPE vocabulary's earliest merges)."""
    counts = Counter(t for seq in sequences for t in seq.input_ids[seq.loss_mask].tolist())
    ranked = [t for t, _ in counts.most_common(count)]
    seen = set(ranked)
    ranked += [t for t in range(vocab_size) if t not in seen][: count - len(ranked)]
    return torch.tensor(ranked[:count], dtype=torch.long)


def with_draft_vocab(model: DSparkDrafter, token_ids: torch.Tensor) -> DSparkDrafter:
    """The same drafter, drafting only among `token_ids`."""
    out = DSparkDrafter(replace(model.config, draft_vocab_size=len(token_ids)))
    if model.config.shares_target_embeddings:
        out.share_target_embeddings(model.embed_tokens.weight.detach(), model.lm_head.weight.detach())
    out.load_state_dict(model.own_state_dict(), strict=False)  # all but the draft vocabulary
    out.set_draft_vocab(token_ids)
    return out.to(next(model.parameters()).dtype).eval()


def start_from(model: DSparkDrafter, directory: str, shape: dict) -> dict:
    """Load a trained drafter's own weights into `model` (the shared embeddings stay the
    target's); returns what it had seen: {drafter, steps, blocks_total, blocks_all_runs}."""
    from hsedit.drafting.dspark import load_drafter

    try:
        trained = load_drafter(directory)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot start from {directory}: {exc}") from exc
    if drafter_shape(trained.config) != shape:
        raise UsageError(f"{directory} is a drafter of another shape: start from it with the same "
                         "--draft-layers, --markov-rank and --anchor-feature")
    model.load_state_dict(trained.own_state_dict(), strict=False)
    report = {}
    if (Path(directory) / "training.json").is_file():
        report = json.loads((Path(directory) / "training.json").read_text())
    blocks = int(report.get("blocks_total", 0))
    return {"drafter": str(directory), "steps": int(report.get("steps", 0)), "blocks_total": blocks,
            "blocks_all_runs": int(report.get("blocks_all_runs", blocks))}


def sequences_id(sequences: Sequence[Sequence_]) -> str:
    """What a checkpoint's data position means: a digest of the training sequences' tokens."""
    digest = hashlib.sha256()
    for seq in sequences:
        digest.update(seq.input_ids.numpy().astype(np.int64).tobytes())
        digest.update(seq.loss_mask.numpy().tobytes())
    return digest.hexdigest()[:16]


def save_checkpoint(checkpoint: str, state: dict) -> None:
    def write(staging: Path) -> None:
        torch.save(state, staging / STATE_FILE)
        (staging / "progress.json").write_text(json.dumps(
            {"update": state["step"], "blocks_total": state["blocks"], "saved_at": time.time()}, indent=1))

    replace_directory(checkpoint, write)


def save_trained(model: DSparkDrafter, report: dict, output: str | Path) -> Path:
    output = Path(output)
    save_drafter(model, output)
    (output / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    return output


def split_heldout(sequences: list[Sequence_], fraction: float, seed: int) -> tuple[list, list]:
    order = list(range(len(sequences)))
    random.Random(seed).shuffle(order)
    cut = max(1, math.ceil(len(order) * fraction))
    heldout = [sequences[i] for i in order[:cut]]
    train = [sequences[i] for i in order[cut:]]
    return train, heldout


def prepare_sequences(config: DrafterTrainConfig, cfg: DSparkConfig, target_dir: str, log=print) -> list[Sequence_]:
    """Target-written sequences with features, cached at `data_cache` (keyed by the recipe)."""
    from hsedit.train.drafter import data

    cache = Path(config.data_cache) if config.data_cache else None
    key = [target_dir, config.corpus, config.max_prompts, config.edit_examples, config.seed, list(cfg.target_layer_ids)]
    if config.general_prompts:  # (absent otherwise: caches made before the option still match)
        key.append(config.general_prompts)
    key = json.dumps(key)
    if cache and cache.is_file():
        saved = torch.load(cache, weights_only=False)
        if saved.get("key") == key:
            log(f"prepared sequences: {cache} ({len(saved['sequences'])})")
            return saved["sequences"]
    sequences = []
    from hsedit.engine.engine import Engine, EngineOptions
    from hsedit.train.drafter.prompts import general_prompts
    from hsedit.train.finetune.dataset import generate

    engine = Engine(EngineOptions(model=config.target, profile_costs=False))
    try:
        prompts = data.read_prompts(config.corpus, config.max_prompts, config.seed) if config.corpus else []
        prompts += general_prompts(config.general_prompts, config.seed)
        log(f"answering {len(prompts)} prompts with the target")
        sequences += data.chat_sequences(engine, prompts)
        examples = [e for e in generate(seed=config.seed, limit_per_kind=max(1, config.edit_examples // 8))
                    if e.split == "train"][: config.edit_examples]
        sequences += data.edit_sequences(engine.tokenizer, examples)
    finally:
        engine.close()
    log(f"computing target features for {len(sequences)} sequences")
    prepared = data.target_features(target_dir, cfg, sequences, log)
    if cache:
        cache.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"key": key, "sequences": prepared}, cache)
    return prepared


def run(config: DrafterTrainConfig, log: Callable[[str], None] = print) -> tuple[Path, dict]:
    from hsedit.engine.provision import resolve_model
    from hsedit.train.drafter import data

    target_dir = resolve_model(config.target)
    cfg = drafter_config(config, target_dir)
    sequences = prepare_sequences(config, cfg, target_dir, log)
    return train_and_save(config, cfg, sequences, data.target_weights(target_dir), log)


def drafter_config(config: DrafterTrainConfig, target_dir: str) -> DSparkConfig:
    """The drafter's shape for a target directory, recording that target's identity."""
    from hsedit.engine.provision import target_identity

    return DSparkConfig.for_target(
        json.loads((Path(target_dir) / "config.json").read_text()),
        num_hidden_layers=config.draft_layers,
        markov_rank=config.markov_rank,
        anchor_feature=config.anchor_feature,
        mask_token_id=_mask_token(target_dir),
        target=target_identity(target_dir),
    )


def train_and_save(config: DrafterTrainConfig, cfg: DSparkConfig, sequences: list[Sequence_],
                   target: dict[str, torch.Tensor], log: Callable[[str], None] = print) -> tuple[Path, dict]:
    train, heldout = split_heldout(sequences, config.heldout_fraction, config.seed)
    log(f"training on {len(train)} sequences for {config.minutes:g} min; {len(heldout)} held out")
    model, report = train_drafter(cfg, target, train, heldout, config, log)
    return save_trained(model, report, config.output), report


def _mask_token(target_dir: str) -> int:
    """A token the drafter's mask slots embed as: an added special token that text never holds."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    specials = set(tokenizer.all_special_ids)
    for token_id in sorted(tokenizer.added_tokens_decoder):
        if token_id not in specials:
            return int(token_id)
    return int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)


def evaluate(drafter_dir: str, target: str | None, prompts: Sequence[str], edit_examples: Sequence,
             log: Callable[[str], None] = print) -> dict:
    """Offline calibration of a drafter on new data: per-position acceptance (greedy, against
    the target's greedy choice), mean accepted per block, ECE/AUC/log-loss of survival with and
    without its STS temperatures."""
    from hsedit.drafting.dspark import load_drafter
    from hsedit.engine.engine import Engine, EngineOptions
    from hsedit.engine.provision import resolve_model
    from hsedit.train.drafter import data

    target_dir = resolve_model(target)
    model = load_drafter(drafter_dir)
    weights = data.target_weights(target_dir)
    embed = weights["model.embed_tokens.weight"]
    model.share_target_embeddings(embed, weights.get("lm_head.weight", embed))
    engine = Engine(EngineOptions(model=target, profile_costs=False))
    try:
        sequences = data.chat_sequences(engine, prompts) if prompts else []
        edits = data.edit_sequences(engine.tokenizer, edit_examples) if edit_examples else []
    finally:
        engine.close()
    report = {}
    for name, part in (("prompts", sequences), ("edits", edits)):
        if not part:
            continue
        log(f"{name}: target features for {len(part)} sequences")
        logits, accepted, valid = greedy_blocks(model, data.target_features(target_dir, model.config, part, log))
        temperatures = np.asarray(model.config.sts_temperatures or [1.0] * model.config.block_size)
        report[name] = {
            "before_sts": calibration_report(logits, accepted, valid, np.ones(model.config.block_size)),
            "after_sts": calibration_report(logits, accepted, valid, temperatures),
        }
    return report
