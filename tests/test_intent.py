"""One grammar: every phrasing the apply model is trained on parses back to the intent that
produced it, and the instruction check reads instructions through the same parse."""

import pytest

from hsedit.edit.check import check_edit
from hsedit.edit.intent import (
    CLASS,
    FUNCTION,
    AddParameter,
    Delete,
    FreeForm,
    FStrings,
    Rename,
    RemovePrints,
    SetConstant,
    SnippetMerge,
    TypeHints,
    parse_intent,
)
from hsedit.train.finetune import edits


def _renames():
    for template in set(edits.RENAME_TEMPLATES + edits.FILE_RENAME_TEMPLATES):
        for what in ("function", "class", "variable", "constant"):
            yield template.format(what=what, old="load_items", new="fetch_items"), Rename("load_items", "fetch_items")
    for template in edits.RENAME_LOCAL_TEMPLATES:
        yield template.format(func="parse", old="count", new="total"), Rename("count", "total", "parse")


def _others():
    for template in edits.CONSTANT_TEMPLATES:
        yield template.format(name="LIMIT", v="32"), SetConstant("LIMIT", "32")
        yield template.format(name="MODE", v="'fast'"), SetConstant("MODE", "'fast'")
    for template in edits.DELETE_INSTRUCTIONS:
        text = template.format(f="old_helper")
        expected_types = (FUNCTION,) if "function" in text else (FUNCTION, CLASS)
        yield text, Delete("old_helper", expected_types)
    for template in edits.TYPE_HINT_TEMPLATES:
        yield template.format(f="parse"), TypeHints("parse")
    for template in edits.FSTRING_INSTRUCTIONS:
        yield template, FStrings(None)
    for template in edits.DEBUG_PRINT_INSTRUCTIONS:
        yield template.format(f="parse"), RemovePrints("parse" if "{f}" in template else None, False)
    for template in edits.ADD_PARAMETER_TEMPLATES:
        yield template.format(p="timeout", d="None", f="fetch"), AddParameter("fetch", "timeout", "None")
    for template in edits.TYPED_PARAMETER_TEMPLATES:
        yield (template.format(p="timeout", d="None", t="float | None", f="fetch"),
               AddParameter("fetch", "timeout", "None", "float | None"))


@pytest.mark.parametrize(("instruction", "intent"), [*_renames(), *_others()], ids=lambda v: str(v)[:60])
def test_every_training_phrasing_parses_back_to_its_intent(instruction, intent):
    assert parse_intent(instruction) == intent


@pytest.mark.parametrize(("instruction", "intent"), [
    ("add a parameter strict: bool = False to the function fnmatch", AddParameter("fnmatch", "strict", "False", "bool")),
    ("add the parameter `retries: int = 3` to get", AddParameter("get", "retries", "3", "int")),
    ("add an argument verbose: bool to f", AddParameter("f", "verbose", None, "bool")),
    ("add a parameter limit=10 to the function take", AddParameter("take", "limit", "10")),
    ("add a parameter x: dict[str, int] = {} to f", AddParameter("f", "x", "{}", "dict[str, int]")),
    ("convert the % formatting in the function formatmonthname to f-strings", FStrings("formatmonthname")),
    ("convert % formatting to f-strings in the function f", FStrings("f")),
])
def test_phrasings_users_write_beside_the_training_ones(instruction, intent):
    assert parse_intent(instruction) == intent


def test_a_snippet_is_a_merge_and_the_unknown_is_free_form():
    assert parse_intent("", "x = 1\n") == SnippetMerge("x = 1\n")
    free = parse_intent("make `load_config` cache its result in _CACHE")
    assert isinstance(free, FreeForm) and free.names == ("load_config", "_CACHE")
    # two scopes in one rename: which one is meant cannot be told
    assert isinstance(parse_intent("in f, rename x to y inside g"), FreeForm)


def test_the_check_reads_the_same_intent():
    code = "def f(count):\n    return count + 1\n"
    renamed = code.replace("count", "total")
    assert check_edit("a.py", code, renamed, "rename count to total").ok is True
    assert check_edit("a.py", code, renamed, "make it better").ok is None


def test_every_right_answer_fits_the_room_its_intent_leaves_and_a_runaway_does_not():
    """The answer budget of a bounded intent is tight enough to stop a runaway early, so it
    must hold every right answer: the held-out chunks, regions, whole files and real-file
    renames, tokenized as the engine counts the answer (the new code, then the closing fence)."""
    from transformers import AutoTokenizer

    from hsedit.apply import ANSWER_GROWTH, answer_budget
    from hsedit.edit.intent import answer_growth_bound
    from hsedit.edit.prompt import completion_for
    from hsedit.engine.provision import resolve_model
    from hsedit.train.finetune.dataset import HELDOUT, HELDOUT_FILES, HELDOUT_REGIONS, HELDOUT_RENAMES, load

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("embedded-base"))
    examples = [e for path in (HELDOUT, HELDOUT_FILES, HELDOUT_REGIONS, *HELDOUT_RENAMES.values()) for e in load(path)]
    bounded = tightened = 0
    for example in examples:
        intent = parse_intent(example.instruction, example.update)
        if answer_growth_bound(intent, example.before) is None:
            continue
        bounded += 1
        file_tokens = len(tokenizer.encode(example.before))
        budget = answer_budget(intent, example.before, file_tokens)
        answer = len(tokenizer.encode(completion_for(example.after)))
        assert answer <= budget, f"{example.kind} {example.path}: a right answer of {answer} tokens, room {budget}"
        if file_tokens > 200:
            assert 2 * file_tokens > budget  # the file twice over (a runaway) is stopped
            tightened += budget < int(file_tokens * ANSWER_GROWTH)
    assert bounded > 400 and tightened > bounded / 4, (bounded, tightened)
