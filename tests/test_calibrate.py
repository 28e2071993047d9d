"""`hsedit calibrate` on the real engine: verified copy chains become a fitted, scored model."""

import math

import pytest
from typer.testing import CliRunner

from hsedit.cli import app
from hsedit.drafting.copy_acceptance import CopyAcceptanceModel
from hsedit.train.calibrate import (
    EditPrompt,
    calibrate,
    edit_prompts_from_heldout,
    split_prompts,
    verified_copy_chains,
)

runner = CliRunner()


def test_the_prompt_split_is_stable_and_disjoint():
    prompts = [f"question {i}" for i in range(200)]
    fit, held = split_prompts(prompts)
    assert set(fit).isdisjoint(held) and len(fit) + len(held) == 200
    assert 15 <= len(held) <= 70
    assert split_prompts(list(reversed(prompts)))[1] == list(reversed(held))


@pytest.mark.engine
def test_chains_carry_features_and_verification(copy_engine):
    code = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    prompt = copy_engine.chat_prompt("Repeat this code exactly:\n```python\n" + code + "```")
    (chains,) = verified_copy_chains(copy_engine, [prompt])
    assert chains, "copying code must verify copy chains"
    assert all(0 <= c.accepted <= c.drafted <= 15 for c in chains)
    assert sum(c.accepted for c in chains) > 10
    assert all(c.features.match_len >= 3 for c in chains)


@pytest.mark.engine
def test_calibrate_fits_and_reports_on_general_and_edit_data(copy_engine, tmp_path):
    general = [f"Write a Python function number {i} that returns the sum of a list, with a docstring." for i in range(12)]
    general += ["Repeat the word 'alpha beta gamma delta' five times.", "List the days of the week twice."]
    codes = [f"values_{i} = [1, 2, 3, {i}]\ntotal_{i} = sum(values_{i})\nprint(total_{i}, len(values_{i}))\n" for i in range(10)]
    edit = [EditPrompt(copy_engine.chat_prompt("Repeat this code exactly:\n```python\n" + code + "```"), code)
            for code in codes]
    model, report = calibrate(copy_engine, general, edit, "embedded", log=lambda _: None)
    assert isinstance(model, CopyAcceptanceModel) and len(model.coefficients) == 6
    for part in ("fit", "heldout_general", "edits_fit_shift", "heldout_edits"):
        scores = report[part]
        assert scores["positions"] > 0 and 0 <= scores["ece"] <= 1
    # Repeating code copies it: fit on the edits' copies, the shift makes them likelier, and
    # scores the held-out edits better than the general-text coefficients alone.
    assert model.reference_offset == report["reference_offset"] > 0
    assert report["heldout_edits"]["log_loss"] < report["heldout_edits_unshifted"]["log_loss"]
    # Better than the best constant guess (the acceptance rate itself) on the data it was fit to:
    # the features carry information beyond the base rate.
    rate = report["fit"]["accepted_rate"]
    constant = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))
    assert report["fit"]["log_loss"] < constant
    path = tmp_path / "copy.json"
    model.save(path)
    assert CopyAcceptanceModel.load(path) == model


@pytest.mark.engine
def test_held_out_edits_carry_the_prediction_apply_sends(copy_engine):
    """A rename's or a constant's edit is calibrated with its predicted answer as the reference,
    as `hsedit apply` sends it, not the file it edits (which its prompt holds verbatim)."""
    from hsedit.edit.intent import Rename, SetConstant, parse_intent
    from hsedit.train.finetune.dataset import HELDOUT, load

    prompts = edit_prompts_from_heldout(copy_engine, 80)
    predicted = [p for p in prompts if p.reference not in p.prompt]
    mechanical = sum(isinstance(parse_intent(e.instruction, e.update), Rename | SetConstant)
                     for e in load(HELDOUT, split="eval"))
    assert mechanical, "the held-out set has no rename or constant: nothing was tested"
    assert predicted, "no held-out edit was calibrated with its predicted answer"


def test_calibrate_without_prompt_files_is_a_usage_error(tmp_path):
    missing = tmp_path / "none.jsonl"
    result = runner.invoke(app, ["calibrate", "--prompts", str(missing)])
    assert result.exit_code == 2
    assert "no such prompt file" in result.output
