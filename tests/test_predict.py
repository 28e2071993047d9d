"""The answer an intent predicts (`hsedit/edit/predict.py`), which the copy drafter copies from."""

from pathlib import Path

import pytest

from hsedit.drafting.copy_drafter import CopyIndex
from hsedit.edit.intent import parse_intent
from hsedit.edit.predict import answer_reference, predicted_answer
from hsedit.edit.prompt import completion_for

SOURCE = '''\
LIMIT = 10


class Store:
    """Keeps a total; `total` in prose stays."""

    def add(self, total):  # total: a number
        self.total = total + LIMIT
        return self.total


def report(store):
    total = store.total
    return f"{total} items"
'''


def test_a_rename_predicts_every_identifier_and_leaves_strings_and_comments():
    predicted = predicted_answer(parse_intent("rename total to amount"), SOURCE)
    assert predicted == (SOURCE.replace("self, total)", "self, amount)").replace("= total +", "= amount +")
                         .replace("self.total", "self.amount").replace("    total = store.total", "    amount = store.amount")
                         .replace('f"{total}', 'f"{amount}'))
    assert '"""Keeps a total; `total` in prose stays."""' in predicted and "# total: a number" in predicted


def test_a_rename_predicts_the_modules_exports_of_the_name():
    source = '__all__ = ["total", "totals"]\n\ntotal = 1\n'
    assert predicted_answer(parse_intent("rename total to amount"), source) == '__all__ = ["amount", "totals"]\n\namount = 1\n'


def test_a_scoped_rename_predicts_inside_its_definition_only():
    predicted = predicted_answer(parse_intent("in report, rename total to amount"), SOURCE)
    assert predicted == SOURCE.replace("    total = store.total", "    amount = store.amount").replace(
        'f"{total}', 'f"{amount}')


def test_a_constant_is_predicted_with_its_new_value():
    assert predicted_answer(parse_intent("set LIMIT to 25"), SOURCE) == SOURCE.replace("LIMIT = 10", "LIMIT = 25", 1)


def test_no_prediction_where_the_intent_has_no_mechanical_part_or_it_changes_nothing():
    assert predicted_answer(parse_intent("make the code faster"), SOURCE) is None
    assert predicted_answer(parse_intent("rename missing to present"), SOURCE) is None


def test_the_copy_drafter_follows_the_prediction_once_the_answer_wrote_a_renamed_use():
    """Index = prediction, then the prompt (the original), then the answer so far: after the
    first renamed use the prediction matches for longer, so the next use is drafted renamed."""
    original = [1, 2, 3, 50, 4, 5, 6, 50, 7, 8]  # 50: the old name
    predicted = [1, 2, 3, 60, 4, 5, 6, 60, 7, 8]  # 60: the new name
    index = CopyIndex()
    index.extend(predicted + [99] + original + [98] + [1, 2, 3, 60, 4])
    chain = index.propose(8)
    assert chain.tokens == [5, 6, 60, 7, 8, 99, 1, 2]
    plain = CopyIndex()  # without it nothing matches past the renamed use (the planner guesses a resync)
    plain.extend([99] + original + [98] + [1, 2, 3, 60, 4])
    assert plain.propose(8) is None


def test_seeded_with_the_prediction_the_first_renamed_use_is_drafted_renamed():
    """Before the first renamed use the prediction and the original match the answer equally; the
    prediction is what the answer is expected to be, so the first use is drafted renamed too."""
    original = [1, 2, 3, 50, 4, 5, 6, 50, 7, 8]
    predicted = [1, 2, 3, 60, 4, 5, 6, 60, 7, 8]
    index = CopyIndex()
    index.seed(predicted)
    index.extend([99] + original + [98] + [1, 2, 3])
    assert index.propose(8).tokens == [60, 4, 5, 6, 60, 7, 8]


def test_the_reference_is_the_answer_as_written_with_its_closing_fence():
    intent = parse_intent("rename total to amount")
    assert answer_reference(intent, SOURCE) == completion_for(predicted_answer(intent, SOURCE))
    assert answer_reference(intent, SOURCE).endswith("\n```")
    assert answer_reference(parse_intent("make the code faster"), SOURCE) == completion_for(SOURCE)


@pytest.mark.engine
def test_an_edit_request_carries_its_predicted_answer_and_the_answer_is_the_plain_engines(copy_engine, plain_engine):
    """The copy drafter is seeded with the renamed text; the answer stays plain decoding's."""
    from hsedit.apply import EditJob, edit_request
    from hsedit.edit.files import SourceFile

    job = EditJob.for_source(SourceFile.from_text(Path("store.py"), SOURCE), "store.py", "rename total to amount")
    request = edit_request(copy_engine, job)
    assert copy_engine.tokenizer.decode(request.prediction) == answer_reference(parse_intent(job.instruction), SOURCE)
    (drafted,) = copy_engine.generate([request])
    (plain,) = plain_engine.generate([edit_request(plain_engine, job)])
    assert drafted.token_ids == plain.token_ids and drafted.stats.accepted_prediction_tokens > 0
    other = EditJob.for_source(SourceFile.from_text(Path("store.py"), SOURCE), "store.py", "make it faster")
    assert edit_request(copy_engine, other).prediction == copy_engine.tokenizer.encode(completion_for(SOURCE))
