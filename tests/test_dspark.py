"""The DSpark drafter module: DeepSpec-layout checkpoints, drafting, survival, training, STS."""

import json

import numpy as np
import pytest
import torch

from hsedit.drafting.calibration import auc, ece, fit_sts, survival_from_logits
from hsedit.drafting.dspark import ContextCache, DSparkConfig, DSparkDrafter, load_drafter, save_drafter
from hsedit.drafting.model_drafter import FeatureRows, ModelDrafter
from hsedit.errors import UsageError
from hsedit.train.drafter.data import Sequence_
from hsedit.train.drafter.train import (
    DrafterTrainConfig,
    acceptance_summary,
    bigram_blocks,
    dspark_loss,
    greedy_blocks,
    save_trained,
    train_drafter,
)

TINY_TARGET = dict(
    hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    vocab_size=97, num_hidden_layers=4, rms_norm_eps=1e-6, rope_theta=10000.0,
)


def tiny_config(**overrides) -> DSparkConfig:
    return DSparkConfig.for_target(TINY_TARGET, **{"mask_token_id": 96, "markov_rank": 4, **overrides})


def random_drafter(seed=0, **overrides) -> DSparkDrafter:
    torch.manual_seed(seed)
    model = DSparkDrafter(tiny_config(**overrides))
    for p in model.parameters():  # markov_w2 starts at zero: give every weight something to show
        torch.nn.init.normal_(p, std=0.3)
    return model.eval()


def filled_cache(model, length=11, seed=1) -> ContextCache:
    g = torch.Generator().manual_seed(seed)
    cache = ContextCache()
    model.extend_context(cache, torch.randn(length, model.config.feature_size, generator=g))
    return cache


def test_layer_spread_follows_deepspec():
    assert DSparkConfig.for_target({**TINY_TARGET, "num_hidden_layers": 30}).target_layer_ids == (1, 14, 27)
    assert tiny_config().target_layer_ids == (1,)


def test_checkpoint_round_trip_keeps_drafts_and_temperatures(tmp_path):
    model = random_drafter()
    model.config = DSparkConfig(**{**model.config.__dict__, "sts_temperatures": tuple([1.5] * 7)})
    model.sts_temperatures = torch.full((7,), 1.5)
    embed, head = model.embed_tokens.weight.detach().clone(), model.lm_head.weight.detach().clone()
    save_drafter(model, tmp_path, dtype=torch.float32)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architectures"] == ["Qwen3DSparkModel"] and saved["block_size"] == 7
    from safetensors.torch import load_file

    names = set(load_file(str(tmp_path / "model.safetensors")))
    assert "embed_tokens.weight" not in names and "fc.weight" in names  # shared with the target
    assert "markov_head.markov_w1.weight" in names and "confidence_head.proj.weight" in names

    loaded = load_drafter(tmp_path)
    loaded.share_target_embeddings(embed, head)
    a = model.draft([filled_cache(model)], [5])
    b = loaded.draft([filled_cache(loaded)], [5])
    assert torch.equal(a.tokens, b.tokens)
    assert torch.allclose(a.survival, b.survival, atol=1e-6)
    assert loaded.config.sts_temperatures == (1.5,) * 7


def deepspec_checkpoint(directory, model: DSparkDrafter) -> None:
    """Write a checkpoint the way DeepSpec's save_pretrained does: its own embeddings and head,
    `rope_theta` at the top level, no hsedit section."""
    from safetensors.torch import save_file

    cfg = model.config
    raw = {
        "architectures": ["Qwen3DSparkModel"], "model_type": "qwen3", **TINY_TARGET,
        "num_hidden_layers": cfg.num_hidden_layers, "num_target_layers": cfg.num_target_layers,
        "target_layer_ids": list(cfg.target_layer_ids), "block_size": 7, "mask_token_id": 96,
        "num_anchors": 512, "enable_confidence_head": True, "confidence_head_with_markov": True,
        "markov_rank": 4, "markov_head_type": "vanilla", "tie_word_embeddings": False,
    }
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(raw))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(directory / "model.safetensors"))


def test_a_tiny_random_target_and_deepspec_drafter_load_and_draft(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    target = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in TINY_TARGET.items()}, tie_word_embeddings=True)).eval()
    model = random_drafter()
    deepspec_checkpoint(tmp_path / "drafter", model)
    drafter = load_drafter(tmp_path / "drafter")
    assert not drafter.config.shares_target_embeddings  # DeepSpec checkpoints carry their own
    assert torch.equal(drafter.embed_tokens.weight, model.embed_tokens.weight)

    ids = torch.randint(0, 96, (1, 9))
    with torch.no_grad():
        hidden = target(ids, output_hidden_states=True).hidden_states
    features = torch.cat([hidden[i + 1][0] for i in drafter.config.target_layer_ids], dim=-1)
    runner = ModelDrafter(drafter)
    # The anchor (last token) has no features yet: the drafter keeps positions before it.
    runner.observe([("r", FeatureRows(features, start=0, num_tokens=10))])
    chains = runner.propose([("r", int(ids[0, -1]), 7)])
    chain = chains["r"]
    assert len(chain.tokens) == 7 and all(0 <= t < 97 for t in chain.tokens)
    assert all(0 < c < 1 for c in chain.confidences)


def test_survival_is_non_increasing_along_the_chain():
    model = random_drafter(seed=3)
    caches = [filled_cache(model, length=n, seed=n) for n in (1, 4, 17)]
    block = model.draft(caches, [1, 2, 3])
    assert block.survival.shape == (3, 7)
    assert torch.all(block.survival[:, 1:] <= block.survival[:, :-1])
    assert torch.allclose(block.survival, block.confidences.cumprod(1))


def test_a_draft_vocabulary_drafts_the_best_tokens_among_its_own():
    """FR-Spec's pruned head: with every token in it (in any order) the drafts are the full
    head's; with a part, each slot drafts the best token of that part (Markov bias included),
    and the fast copies of the heads draft the same."""
    from hsedit.train.drafter.train import with_draft_vocab

    model = random_drafter(seed=6)
    vocab = model.config.vocab_size
    caches = [filled_cache(model, length=n, seed=n) for n in (2, 9)]
    full = model.draft(caches, [4, 8])
    everything = with_draft_vocab(model, torch.randperm(vocab, generator=torch.Generator().manual_seed(0)))
    assert torch.equal(everything.draft(caches, [4, 8]).tokens, full.tokens)

    allowed = torch.tensor([t for t in range(vocab) if t not in set(full.tokens[:, 0].tolist())][:40])
    part = with_draft_vocab(model, allowed)
    drafted = part.draft(caches, [4, 8])
    assert set(drafted.tokens.flatten().tolist()) <= set(allowed.tolist())
    hidden = model.block_hidden(caches, torch.tensor([4, 8]))
    prev = torch.tensor([4, 8])
    for k in range(7):  # slot by slot, the best allowed token after the one drafted before it
        logits = model.lm_head(hidden[:, k]) + model.markov_bias(prev)
        prev = allowed[logits[:, allowed].argmax(-1)]
        assert torch.equal(drafted.tokens[:, k], prev)
    part.use_fast_head(torch.float32)
    assert torch.equal(part.draft(caches, [4, 8]).tokens, drafted.tokens)


def test_a_draft_vocabulary_survives_a_save_and_load(tmp_path):
    from hsedit.train.drafter.train import with_draft_vocab

    model = random_drafter(seed=7)
    embed, head = model.embed_tokens.weight.detach().clone(), model.lm_head.weight.detach().clone()
    part = with_draft_vocab(model, torch.arange(96, 56, -1))
    save_drafter(part, tmp_path)  # weights in bf16, the vocabulary as integers (bf16 holds ids < 257 only)
    from safetensors.torch import load_file

    assert load_file(str(tmp_path / "model.safetensors"))["draft_vocab"].dtype == torch.int64
    loaded = load_drafter(tmp_path)
    loaded.share_target_embeddings(embed, head)
    assert loaded.config.draft_vocab_size == 40 and torch.equal(loaded.draft_vocab, torch.arange(96, 56, -1))


def test_incremental_context_equals_one_pass():
    model = random_drafter(seed=4)
    features = torch.randn(12, model.config.feature_size)
    whole, pieces = ContextCache(), ContextCache()
    model.extend_context(whole, features)
    for chunk in (features[:5], features[5:6], features[6:]):
        model.extend_context(pieces, chunk)
    a, b = model.draft([whole], [7]), model.draft([pieces], [7])
    assert torch.equal(a.tokens, b.tokens) and torch.allclose(a.survival, b.survival, atol=1e-6)


def test_drafts_in_a_batch_equal_drafts_alone():
    model = random_drafter(seed=5)
    caches = [filled_cache(model, length=n, seed=n) for n in (3, 9)]
    together = model.draft(caches, [4, 8])
    for i, (cache, anchor) in enumerate(zip(caches, [4, 8])):
        alone = model.draft([cache], [anchor])
        assert torch.equal(alone.tokens[0], together.tokens[i])


@pytest.mark.parametrize("anchor_feature", [False, True])
def test_training_blocks_match_inference_drafting(anchor_feature):
    """A teacher-forced training block sees what inference sees at the same anchor (with the
    anchor row reading the context row before it, or not)."""
    model = random_drafter(seed=6, anchor_feature=anchor_feature)
    seq = 14
    ids = torch.randint(0, 96, (seq,))
    features = torch.randn(seq, model.config.feature_size)
    anchors = torch.tensor([1, 3, 9])
    with torch.no_grad():
        _, hidden, _ = model.training_blocks(ids, features, anchors)
        for block, p in enumerate(anchors.tolist()):
            whole, pieces = ContextCache(), ContextCache()  # in one pass, and as steps bring it
            model.extend_context(whole, features[:p])
            for chunk in (features[: p // 2], features[p // 2 : p]):
                model.extend_context(pieces, chunk)
            for cache in (whole, pieces):
                alone = model.block_hidden([cache], ids[p : p + 1])[0]
                assert torch.allclose(alone, hidden[block], atol=1e-5)


def test_the_anchor_row_adds_the_projected_context_row_before_it():
    """EAGLE's input as an option: the anchor slot's input is its embedding plus the last context
    row (the target's state that predicted the anchor); the mask slots are unchanged. The
    option travels in config.json and a config without it (DeepSpec's) leaves it off."""
    eagle, plain = random_drafter(seed=7, anchor_feature=True), random_drafter(seed=7)  # same weights
    cache = filled_cache(eagle, length=9)
    assert cache.rows.shape == (9, eagle.config.hidden_size) and filled_cache(plain).rows is None
    with torch.no_grad():
        a = eagle.block_embeddings(eagle.block_inputs(torch.tensor([5])), cache.rows[-1:])
        b = plain.block_embeddings(plain.block_inputs(torch.tensor([5])), None)
    assert torch.allclose(a[0, 0] - b[0, 0], cache.rows[-1], atol=1e-6) and torch.equal(a[0, 1:], b[0, 1:])
    assert DSparkConfig.from_dict(eagle.config.to_dict()).anchor_feature is True
    assert DSparkConfig.from_dict(plain.config.to_dict()).anchor_feature is False


def test_a_gap_in_features_stops_drafting_for_that_request():
    runner = ModelDrafter(random_drafter())
    size = runner.model.config.feature_size
    runner.observe([("r", FeatureRows(torch.randn(4, size), start=0, num_tokens=5))])
    runner.observe([("r", FeatureRows(torch.randn(2, size), start=7, num_tokens=9))])  # positions 4-6 never seen
    assert runner.propose([("r", 1, 7)]) == {}


def target_weights_of(template) -> dict:
    """What `train_drafter` takes of a target: its embeddings and LM head (here a drafter's)."""
    return {"model.embed_tokens.weight": template.embed_tokens.weight.detach(),
            "lm_head.weight": template.lm_head.weight.detach()}


def synthetic_sequences(model, count=6, length=40, seed=0):
    """Sequences whose 'target' is a fixed random function of the features, so there is signal."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(0, 96, (length,), generator=g)
        features = torch.randn(length, model.config.feature_size, generator=g)
        final = torch.randn(length, model.config.hidden_size, generator=g)
        mask = torch.zeros(length, dtype=torch.bool)
        mask[length // 3 :] = True
        out.append(Sequence_(ids, mask, features.to(torch.bfloat16), final.to(torch.bfloat16), "synthetic"))
    return out


def test_training_lowers_the_dspark_loss():
    torch.manual_seed(0)
    template = random_drafter()
    seqs = synthetic_sequences(template)
    cfg = tiny_config()
    target = target_weights_of(template)
    fresh = DSparkDrafter(cfg)
    fresh.share_target_embeddings(target["model.embed_tokens.weight"], target["lm_head.weight"])
    anchors = torch.arange(12, 30, 3)
    with torch.no_grad():
        before = float(dspark_loss(fresh, seqs[0], anchors)[0])
    config = DrafterTrainConfig(minutes=5, max_steps=40, learning_rate=3e-3, anchors=8)
    trained, report = train_drafter(cfg, target, seqs, seqs[:2], config, log=lambda _: None)
    with torch.no_grad():
        after = float(dspark_loss(trained, seqs[0], anchors)[0])
    assert report["steps"] == 40 and after < before
    assert len(report["sts_temperatures"]) == 7
    logits, accepted, valid = greedy_blocks(trained, seqs[:2])
    assert logits.shape == accepted.shape == valid.shape and logits.shape[1] == 7


def test_drafter_training_resumed_from_a_checkpoint_equals_one_run(tmp_path):
    """Budgets accumulate: 10 updates, then 14 more from the checkpoint (across a pass over the
    6 sequences), give the weights of one 24-update run with the same schedule."""
    template = random_drafter()
    seqs = synthetic_sequences(template)
    target = target_weights_of(template)

    def run(checkpoint, steps):
        config = DrafterTrainConfig(minutes=5, max_steps=steps, learning_rate=3e-3, anchors=8,
                                    checkpoint=str(checkpoint), budget_updates=40)
        return train_drafter(tiny_config(), target, seqs, seqs[:2], config, log=lambda _: None)

    whole, report = run(tmp_path / "whole", 24)
    run(tmp_path / "split", 10)
    resumed, resumed_report = run(tmp_path / "split", 14)
    assert report["steps"] == resumed_report["steps"] == 24
    assert resumed_report["blocks_total"] == report["blocks_total"] > 0
    mine, theirs = whole.own_state_dict(), resumed.own_state_dict()
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert torch.allclose(mine[name], theirs[name], atol=1e-6), name
    # a checkpoint of other sequences is refused, not silently continued
    with pytest.raises(UsageError, match="other data"):
        train_drafter(tiny_config(), target, seqs[:3], seqs[:2],
                      DrafterTrainConfig(max_steps=1, checkpoint=str(tmp_path / "split")), log=lambda _: None)
    # and so is one of another shape (its weights would load half-meaningfully: no new tensors)
    with pytest.raises(UsageError, match="another shape"):
        train_drafter(tiny_config(anchor_feature=True), target, seqs, seqs[:2],
                      DrafterTrainConfig(max_steps=1, checkpoint=str(tmp_path / "split")), log=lambda _: None)


def test_training_can_start_from_a_trained_drafter(tmp_path):
    """--init-drafter: a run on other data starts from a trained drafter's weights (not random
    ones) and counts the blocks that drafter saw; a drafter of another shape is refused."""
    template = random_drafter()
    seqs = synthetic_sequences(template)
    target = target_weights_of(template)
    first, report = train_drafter(tiny_config(), target, seqs, seqs[:2],
                                  DrafterTrainConfig(max_steps=10, learning_rate=3e-3, anchors=8), log=lambda _: None)
    save_trained(first, report, tmp_path / "first")
    saved = load_drafter(tmp_path / "first").own_state_dict()

    def run(steps):
        config = DrafterTrainConfig(max_steps=steps, learning_rate=3e-3, anchors=8, init_drafter=str(tmp_path / "first"))
        return train_drafter(tiny_config(), target, seqs[2:], seqs[:2], config, log=lambda _: None)

    started, started_report = run(0)
    for name, weight in started.own_state_dict().items():
        assert torch.equal(weight, saved[name]), name
    assert started_report["init"]["blocks_total"] == report["blocks_total"] > 0
    assert started_report["blocks_all_runs"] == report["blocks_total"]
    _, more = run(5)
    assert more["blocks_all_runs"] == report["blocks_total"] + more["blocks_total"] > report["blocks_total"]
    with pytest.raises(UsageError, match="another shape"):
        train_drafter(tiny_config(anchor_feature=True), target, seqs, seqs[:2],
                      DrafterTrainConfig(max_steps=1, init_drafter=str(tmp_path / "first")), log=lambda _: None)


def test_training_with_a_draft_vocabulary_drafts_and_calibrates_within_it():
    from collections import Counter

    template = random_drafter()
    seqs = synthetic_sequences(template)
    target = target_weights_of(template)
    config = DrafterTrainConfig(max_steps=5, anchors=8, draft_vocab=20)
    model, report = train_drafter(tiny_config(), target, seqs[2:], seqs[:2], config, log=lambda _: None)
    assert model.config.draft_vocab_size == 20 and len(set(model.draft_vocab.tolist())) == 20
    answers = Counter(t for seq in seqs[2:] for t in seq.input_ids[seq.loss_mask].tolist())
    assert answers.most_common(1)[0][0] in model.draft_vocab.tolist()
    assert len(report["after_sts"]["acceptance_by_position"]) == 7
    block = model.draft([filled_cache(model)], [5])
    assert set(block.tokens.flatten().tolist()) <= set(model.draft_vocab.tolist())


def test_calibration_measures():
    assert ece(np.array([0.9, 0.9, 0.1, 0.1]), np.array([1, 1, 0, 0])) == pytest.approx(0.1)
    assert auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == pytest.approx(0.75)
    assert auc(np.array([0.5, 0.5]), np.array([0, 1])) == pytest.approx(0.5)


def test_sts_repairs_overconfident_survival():
    rng = np.random.default_rng(0)
    n, k = 4000, 7
    true_logits = rng.normal(1.0, 1.5, size=(n, k))
    accepted = rng.random((n, k)) < 1 / (1 + np.exp(-true_logits))
    survived = np.cumprod(accepted, axis=1)
    shown = 3.0 * true_logits  # an overconfident head: right order, logits three times too large
    ones = np.ones(k)
    temperatures = fit_sts(shown, survived, np.ones((n, k), bool))
    before = ece(survival_from_logits(shown, ones)[:, -1], survived[:, -1])
    after = ece(survival_from_logits(shown, temperatures)[:, -1], survived[:, -1])
    assert after < before / 2
    assert temperatures[0] == pytest.approx(3.0, rel=0.25)


@pytest.mark.parametrize("projected", [False, True], ids=["features-waiting", "projected"])
def test_a_request_after_a_prefix_cache_hit_borrows_the_shared_prefix(projected):
    """The engine's prefix cache skips positions a new request shares with an earlier one; their
    keys and values (or features not yet projected) come from that request, so the drafts equal
    those made from every feature."""
    runner = ModelDrafter(random_drafter(seed=7))
    size = runner.model.config.feature_size
    features = torch.randn(12, size, generator=torch.Generator().manual_seed(2))
    tokens = np.arange(13) % 5
    runner.observe([("first", FeatureRows(features[:9], 0, 10, tokens[:10]))])
    if projected:
        runner.propose([("first", int(tokens[9]), 7)])  # drafting projects what waited
    runner.release("first")  # finished; its context stays available to borrow
    # Same first 8 tokens: the engine computes positions 8.. only.
    runner.observe([("second", FeatureRows(features[8:12], 8, 13, tokens))])
    reference = ModelDrafter(runner.model)
    reference.observe([("whole", FeatureRows(features[:12], 0, 13, tokens))])
    mine, theirs = runner.propose([("second", 3, 7)])["second"], reference.propose([("whole", 3, 7)])["whole"]
    assert mine.tokens == theirs.tokens and np.allclose(mine.survival, theirs.survival, atol=1e-5)
    # A different prefix is not borrowed: that request cannot be drafted for.
    other = tokens.copy()
    other[2] += 1
    runner.observe([("third", FeatureRows(features[8:12], 8, 13, other))])
    assert runner.propose([("third", 3, 7)]) == {}


def test_the_bigram_baseline_drafts_what_usually_follows():
    # Answers that always go 5 -> 6 -> 7 -> 5 ...: the baseline drafts the cycle exactly.
    ids = torch.tensor([1, 2] + [5, 6, 7] * 6)
    mask = torch.tensor([False, False] + [True] * 18)
    seq = Sequence_(ids, mask, torch.zeros(20, 4), torch.zeros(20, 4), "synthetic")
    follows = {5: 6, 6: 7, 7: 5, 2: 5}
    target = lambda s, anchors: torch.tensor(  # noqa: E731 - the cycle, from each anchor on
        [[follows_n(follows, int(s.input_ids[a]), k + 1) for k in range(3)] for a in anchors])
    accepted, valid = bigram_blocks([seq], [seq], 3, target)
    summary = acceptance_summary(accepted, valid)
    assert summary["accept@1"] == 1.0 and summary["accepted_per_block"] > 2.5  # full blocks but at the end
    wrong = lambda s, anchors: torch.zeros(len(anchors), 3, dtype=torch.long)  # noqa: E731
    assert acceptance_summary(*bigram_blocks([seq], [seq], 3, wrong)) == {"accept@1": 0.0, "accepted_per_block": 0.0}


def follows_n(follows, token, n):
    for _ in range(n):
        token = follows[token]
    return token


def test_training_reports_the_feature_ablation():
    template = random_drafter()
    seqs = synthetic_sequences(template)
    target = target_weights_of(template)
    config = DrafterTrainConfig(minutes=5, max_steps=5, anchors=8)
    _, report = train_drafter(tiny_config(), target, seqs, seqs[:3], config, log=lambda _: None)
    assert set(report["ablation"]) == {"real", "zeroed", "shifted", "other_sequence", "bigram"}
    for row in report["ablation"].values():
        assert 0.0 <= row["accept@1"] <= 1.0 and 0.0 <= row["accepted_per_block"] <= 7


def test_a_drafter_without_a_markov_head_drafts_with_its_confidence_head():
    """markov_rank 0 with confidence_head_with_markov (allowed): the confidence head reads the
    hidden state alone, as it was built."""
    model = random_drafter(seed=5, markov_rank=0)
    assert model.markov_head is None and model.config.confidence_head_with_markov
    block = model.draft([filled_cache(model)], [3])
    assert block.tokens.shape == (1, 7) and torch.all(block.survival <= 1)


def test_training_further_drops_the_fast_heads():
    """The fast copies of the heads are inference's: a drafter put back into training and then
    drafting again drafts with its trained weights, not the copies."""
    from hsedit.train.drafter.train import with_draft_vocab

    every_token = torch.arange(TINY_TARGET["vocab_size"])  # a draft vocabulary: the copies are copies
    model = with_draft_vocab(random_drafter(seed=7), every_token)
    caches = [filled_cache(model, length=6)]
    model.use_fast_head(torch.float32)
    before = model.draft(caches, [5]).tokens
    model.train()
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # what further training might do to the head
    model.eval()
    fresh = with_draft_vocab(random_drafter(seed=7), every_token)
    with torch.no_grad():
        fresh.lm_head.weight.mul_(-1.0)
    assert torch.equal(model.draft(caches, [5]).tokens, fresh.draft(caches, [5]).tokens)
    assert not torch.equal(model.draft(caches, [5]).tokens, before)


def test_weights_loaded_under_the_fast_heads_are_drafted_with():
    """`load_state_dict` in eval mode with the copies made: they follow the new weights."""
    from hsedit.train.drafter.train import with_draft_vocab

    every_token = torch.arange(TINY_TARGET["vocab_size"])
    model = with_draft_vocab(random_drafter(seed=7), every_token)
    model.use_fast_head(torch.float32)
    caches = [filled_cache(model, length=6)]
    before = model.draft(caches, [5]).tokens
    other = with_draft_vocab(random_drafter(seed=7), every_token)
    with torch.no_grad():
        other.lm_head.weight.mul_(-1.0)
    model.load_state_dict(other.state_dict())
    assert torch.equal(model.draft(caches, [5]).tokens, other.draft(caches, [5]).tokens)
    assert not torch.equal(model.draft(caches, [5]).tokens, before)
