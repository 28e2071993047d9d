"""`hsedit finetune train` on a tiny model with the real tokenizer: a run saves an adapter, and a
later run can continue it (the shipped adapter is continued on whole files that way).

Training runs in child processes, as `hsedit finetune train` does in its own: the test process
keeps none of peft's or transformers' state (conftest.py sets Triton's interpreter before either
could be imported, so that is no longer what it guards)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hsedit.train.finetune.dataset import HELDOUT, load

MAKE_TINY_BASE = """
import sys, torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from hsedit.engine.provision import resolve_model
tokenizer = AutoTokenizer.from_pretrained(resolve_model("embedded-base"))
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(
    vocab_size=len(tokenizer), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2,
))
model.save_pretrained(sys.argv[1])
tokenizer.save_pretrained(sys.argv[1])
"""
TRAIN = """
import json, sys
from hsedit.train.finetune.train import TrainConfig, train
train(TrainConfig(**json.loads(sys.argv[1])), log=lambda _: None)
"""


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    """A 2-layer model with SmolLM2's tokenizer and chat template, saved as an HF directory."""
    out = tmp_path_factory.mktemp("tiny-base")
    subprocess.run([sys.executable, "-c", MAKE_TINY_BASE, str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    rows = [dict(vars(e), split="train") for e in load(HELDOUT)[:4]]
    path = tmp_path_factory.mktemp("data") / "edits.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# The checkpoint tests compare weights across processes. One thread and MKL's conditional
# numerical reproducibility make each run's arithmetic the same in every process: otherwise a
# float rounding that differs with memory alignment or thread timing reaches Adam, whose update
# lr * m / sqrt(v) turns a near-zero gradient's sign into a difference of the order of lr.
REPRODUCIBLE = {**os.environ, "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1"}


def adapter_weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(directory / "adapter_model.safetensors")


def test_a_run_continues_an_adapter_it_is_given(tiny_base, examples, tmp_path):
    def run(out: str, **changes) -> dict[str, torch.Tensor]:
        config = dict(data=str(examples), base_model=str(tiny_base), output=str(tmp_path / out), rank=4,
                      alpha=8, accumulation=2, max_tokens=4096, warmup_steps=1, **changes)
        subprocess.run([sys.executable, "-c", TRAIN, json.dumps(config)], check=True)
        assert json.loads((tmp_path / out / "training.json").read_text())["examples_seen"] == 4
        return adapter_weights(tmp_path / out)

    first = run("first", learning_rate=1e-2)
    unchanged = run("unchanged", init_adapter=str(tmp_path / "first"), learning_rate=0.0, bf16=True)
    assert first.keys() == unchanged.keys()
    assert all(torch.equal(first[k], unchanged[k]) for k in first)  # continued from it, not from a new one
    moved = run("moved", init_adapter=str(tmp_path / "first"), learning_rate=1e-2, bf16=True)
    assert any(not torch.equal(first[k], moved[k]) for k in first)
    assert all(torch.isfinite(v).all() for v in moved.values())
    turned = run("turned", init_adapter=str(tmp_path / "first"), learning_rate=1e-2, bf16=True, wrong_turn_weight=4.0)
    assert any(not torch.equal(moved[k], turned[k]) for k in first)  # the wrong turns' loss is trained on
    assert all(torch.isfinite(v).all() for v in turned.values())


def test_a_checkpointed_run_cut_in_two_trains_as_one_run(tiny_base, examples, tmp_path):
    """Weights, optimizer, data position and random state all travel: two runs of two examples
    each, the second resuming the first, end where one run of four ends."""
    def run(checkpoint: str, **changes) -> dict:
        config = dict(data=str(examples), base_model=str(tiny_base), output=str(tmp_path / ("out-" + checkpoint)),
                      rank=4, alpha=8, accumulation=2, max_tokens=4096, warmup_steps=1, learning_rate=1e-2,
                      checkpoint=str(tmp_path / checkpoint), budget_tokens=20_000, threads=1, **changes)
        subprocess.run([sys.executable, "-c", TRAIN, json.dumps(config)], check=True, env=REPRODUCIBLE)
        return json.loads((tmp_path / checkpoint / "progress.json").read_text())

    whole = run("whole")
    first = run("split", stop_after_examples=2)
    assert first["position"] == 2 and 0 < first["tokens_total"] < whole["tokens_total"]
    second = run("split")
    assert (second["position"], second["tokens_total"]) == (whole["position"], whole["tokens_total"]) == (4, whole["tokens_total"])
    one, two = adapter_weights(tmp_path / "whole" / "adapter"), adapter_weights(tmp_path / "split" / "adapter")
    assert one.keys() == two.keys()
    assert all(torch.equal(one[k], two[k]) for k in one), "the resumed run diverged from the whole one"
    moved = adapter_weights(tmp_path / "out-whole")
    assert all(torch.equal(moved[k], one[k]) for k in one)  # the output adapter is the checkpoint's

    # A run stopped by SIGTERM in the middle of an accumulation group (the signal is sent by the
    # third forward pass) saves where the last update left it and resumes from there.
    config = dict(data=str(examples), base_model=str(tiny_base), output=str(tmp_path / "out-stopped"),
                  rank=4, alpha=8, accumulation=2, max_tokens=4096, warmup_steps=1, learning_rate=1e-2,
                  checkpoint=str(tmp_path / "stopped"), budget_tokens=20_000, threads=1)
    subprocess.run([sys.executable, "-c", TERMINATED_ON_THIRD_FORWARD + TRAIN, json.dumps(config)], check=True,
                   env=REPRODUCIBLE)
    stopped = json.loads((tmp_path / "stopped" / "progress.json").read_text())
    assert (stopped["position"], stopped["tokens_total"]) == (first["position"], first["tokens_total"])
    resumed = run("stopped")
    assert (resumed["position"], resumed["tokens_total"]) == (4, whole["tokens_total"])
    three = adapter_weights(tmp_path / "stopped" / "adapter")
    assert all(torch.equal(one[k], three[k]) for k in one), "the run resumed after SIGTERM diverged"


TERMINATED_ON_THIRD_FORWARD = """
import os, signal, transformers
_load = transformers.AutoModelForCausalLM.from_pretrained
def _loaded(*args, **kwargs):
    model = _load(*args, **kwargs)
    calls = []
    def hook(module, inputs, output):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
    model.register_forward_hook(hook)
    return model
transformers.AutoModelForCausalLM.from_pretrained = _loaded
"""


def test_the_loss_weights_changed_lines_and_equals_the_plain_loss_unweighted():
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from hsedit.engine.provision import resolve_model
    from hsedit.train.finetune.dataset import Example
    from hsedit.train.finetune.train import RESUME_TOKENS, encode_weighted, weighted_loss

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("embedded-base"))
    before = ('def area(width, height):\n    """Multiply the two sides of the rectangle together."""\n'
              "    return width * height\n\n\nprint(area(2, 3))\n")
    example = Example("rename_function", "a.py", "rename area to surface", before,
                      before.replace("area", "surface"), None, "train", "region")
    ids, labels, weights = encode_weighted(tokenizer, example, changed_weight=5.0)
    answer = [k for k, label in enumerate(labels) if label != -100]
    assert all(weights[k] == 0 for k in range(answer[0]))  # the prompt is not learnt
    text = lambda ks: tokenizer.decode([ids[k] for k in ks])  # noqa: E731
    heavy = [k for k in answer if weights[k] == 5.0]
    light = [k for k in answer if weights[k] == 1.0]
    assert "surface" in text(heavy) and "def" in text(heavy)  # the changed lines
    assert "return width * height" in text(light)  # the line the edit keeps, past the resume tokens
    assert len(heavy) < len(answer) and RESUME_TOKENS > 0
    # Unweighted it is the model's own mean cross-entropy.
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=48,
                                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2))
    ids, labels, weights = encode_weighted(tokenizer, example)
    out = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels]))
    mine = weighted_loss(out.logits[0], torch.tensor(labels), torch.tensor(weights))
    assert torch.allclose(mine, out.loss, atol=1e-5)


def test_wrong_turns_are_the_originals_token_where_the_edit_departs_and_the_fence_at_line_starts():
    from transformers import AutoTokenizer

    from hsedit.engine.provision import resolve_model
    from hsedit.train.finetune.dataset import Example
    from hsedit.train.finetune.train import encode_weighted, wrong_turns

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("embedded-base"))
    before = "import math\n\n\ndef area(r):\n    return math.pi * r * r\n\n\nprint(area(2))\n"
    after = before.replace("area", "disc_area")
    example = Example("rename_function", "a.py", "rename area to disc_area", before, after, None, "train", "region")
    ids, labels, _ = encode_weighted(tokenizer, example)
    start = labels.count(-100)
    answer = ids[start:]
    turns = {k: token for k, token, _ in wrong_turns(tokenizer, example, answer)}
    fence = tokenizer("\n```", add_special_tokens=False)["input_ids"][-1]
    departures = {k: token for k, token in turns.items() if token != fence}
    # Two departures, one a use: at each, the answer writes the new name and copying would write the old.
    assert len(departures) == 2
    for k, token in departures.items():
        assert tokenizer.decode(answer[k:k + 3]).lstrip().startswith("disc")
        assert tokenizer.decode([token]).strip() in ("area", "ar", "are")
    # The fence is wrong at every line start but where the answer really ends.
    starts = [0] + [k for k in range(1, len(answer)) if tokenizer.decode([answer[k - 1]]).endswith("\n")]
    real_end = answer.index(fence)
    assert {k for k, token in turns.items() if token == fence} == set(starts) - {real_end} - set(departures)
    assert tokenizer.decode(answer[:real_end]).count("\n") == after.count("\n")
    # The one fence the answer must write can outweigh them: its own tokens, and no others.
    _, _, weights = encode_weighted(tokenizer, example, end_weight=6.0)
    heavy = [k - start for k, weight in enumerate(weights) if weight == 6.0]
    assert heavy == [real_end] and answer[real_end] == fence
    # An answer that is the original itself departs nowhere.
    same = Example("set_constant", "a.py", "leave it", before, before, None, "train", "region")
    ids, labels, _ = encode_weighted(tokenizer, same)
    assert {token for _, token, _ in wrong_turns(tokenizer, same, ids[labels.count(-100):])} == {fence}


def test_an_insertions_departure_weighs_its_share_of_a_wrong_turn():
    from transformers import AutoTokenizer

    from hsedit.engine.provision import resolve_model
    from hsedit.train.finetune.dataset import Example
    from hsedit.train.finetune.train import encode_weighted, wrong_turns

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("embedded-base"))
    before = "def scale(x, factor):\n    return x * factor\n\n\nTOTAL = scale(3, 2)\n"
    # A parameter added (two pure insertions) and a constant renamed (a replacement).
    after = ("def scale(x, factor, offset=0):\n    return x * factor\n\n\n"
             "SUM = scale(3, 2, offset=0)\n")
    example = Example("add_parameter", "a.py", "add offset", before, after, None, "train", "region")
    ids, labels, _ = encode_weighted(tokenizer, example)
    answer = ids[labels.count(-100):]
    fence = tokenizer("\n```", add_special_tokens=False)["input_ids"][-1]

    def departures(share):
        turns = wrong_turns(tokenizer, example, answer, share)
        return {k: (tokenizer.decode([token]), s) for k, token, s in turns if token != fence}

    every, quarter, without = departures(1.0), departures(0.25), departures(0.0)
    # The inserted parameter's departures push down the original's closing parenthesis...
    closing = {k for k, (text, _) in every.items() if text.startswith(")")}
    assert len(closing) == 2 and all(tokenizer.decode(answer[k:k + 2]).startswith(",") for k in closing)
    # ...which is written right after the insertion: at a share they weigh that share, at 0 they
    # are left out, and the rename's departure weighs a whole wrong turn throughout.
    assert set(quarter) == set(every) and {k: s for k, (_, s) in quarter.items()} == {
        k: 0.25 if k in closing else 1.0 for k in every}
    assert set(without) == set(every) - closing and len(without) == 1
    assert tokenizer.decode(answer[next(iter(without)):]).startswith("SUM")


def test_a_wrong_turn_adds_its_unlikelihood_weighed_as_answer_tokens():
    from hsedit.train.finetune.train import weighted_loss

    torch.manual_seed(0)
    logits = torch.randn(6, 11)
    labels = torch.tensor([-100, -100, 3, 5, 7, 2])
    weights = torch.tensor([0.0, 0.0, 1.0, 2.0, 1.0, 1.0])
    plain = weighted_loss(logits, labels, weights)
    assert torch.equal(weighted_loss(logits, labels, weights, [(4, 9, 1.0)], 0.0), plain)
    ce = torch.nn.functional.cross_entropy(logits[:-1], labels[1:], ignore_index=-100, reduction="none")
    w = weights[1:] * (labels[1:] != -100)
    p_wrong = torch.softmax(logits[3], dim=-1)[9]  # the turn at position 4 is predicted at 3
    expected = ((ce * w).sum() + 3.0 * -torch.log(1 - p_wrong)) / (w.sum() + 3.0)
    assert torch.allclose(weighted_loss(logits, labels, weights, [(4, 9, 1.0)], 3.0), expected, atol=1e-6)
    # A turn's share scales its weight: half a turn at 3.0 weighs as a whole one at 1.5.
    assert torch.allclose(weighted_loss(logits, labels, weights, [(4, 9, 0.5)], 3.0),
                          weighted_loss(logits, labels, weights, [(4, 9, 1.0)], 1.5), atol=1e-6)
    # The likelier the wrong token, the larger the loss.
    pushed = logits.clone()
    pushed[3, 9] += 5.0
    assert weighted_loss(pushed, labels, weights, [(4, 9, 1.0)], 3.0) - weighted_loss(pushed, labels, weights) > \
        weighted_loss(logits, labels, weights, [(4, 9, 1.0)], 3.0) - plain


def test_bf16_training_is_refused_where_the_machine_only_emulates_it(monkeypatch, tmp_path):
    """On an AVX2-only CPU a bf16 matmul of a training step's shape runs ~100x slower than fp32:
    `--bf16` there is one clear line and exit 2, before any model is loaded."""
    from typer.testing import CliRunner

    import hsedit.engine.options
    from hsedit.cli import app

    monkeypatch.setattr(hsedit.engine.options, "machine_dtype", lambda: "float32")
    result = CliRunner().invoke(app, ["finetune", "train", "--data", str(tmp_path / "absent.jsonl"),
                                      "--out", str(tmp_path / "out"), "--bf16"])
    assert result.exit_code == 2 and "emulation" in result.output
    assert not (tmp_path / "out").exists()
