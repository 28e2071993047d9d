"""The region cut, the pick by intent and the splice: pure logic on real files, no engine."""

import random
import textwrap
from pathlib import Path

import pytest

from hsedit.edit.check import check_intent
from hsedit.edit.intent import parse_intent
from hsedit.scope import finer_regions
from hsedit.edit.regions import REGION_TOKENS, estimated_tokens, group, own_part, pick, regions_for, splice, units
from hsedit.train.finetune.dataset import Example, region_examples
from hsedit.train.finetune.edits import Edit, rename_everywhere

REAL_FILES = [Path(textwrap.__file__), Path(random.__file__), Path(pytest.__file__).parent / "__init__.py"]

BIG_CLASS = "class Store(Base):\n    '''A store.'''\n\n" + "".join(
    f"    def method_{k}(self, items):\n" + "".join(f"        value_{j} = items[{j}] + {k}\n" for j in range(14)) + "\n"
    for k in range(6)
) + "\ndef use(store):\n    return Store.method_0(store, [1] * 14)\n"


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name)
def test_the_cut_covers_every_line_once_and_splices_back(path):
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    cut = units(text)
    owned = [k for u in cut for k in range(u.start, u.end)]
    assert owned == sorted(set(owned)), "units overlap or run out of order"
    assert all(not lines[k].strip() for k in set(range(len(lines))) - set(owned)), "a non-blank line in no unit"
    regions = group(text, cut)
    for region in regions:
        assert own_part(region, region.shown) == region.own_text  # the model's answer less the head it repeats
    assert splice(text, [(r, r.own_text) for r in regions]) == text


def test_a_large_class_is_cut_into_its_methods_under_its_header():
    cut = units(BIG_CLASS)
    assert estimated_tokens(BIG_CLASS) > REGION_TOKENS
    heads = [u.head for u in cut]
    assert heads[0] == ()  # the first piece owns `class Store(Base):` and its docstring
    assert all(h == ((0, 1),) for h in heads[1:-1])  # the other methods show it read-only
    assert heads[-1] == ()  # `def use` is top-level again
    method = group(BIG_CLASS, [cut[3]])[0]  # the docstring, then method_0, method_1, method_2
    assert method.shown.startswith("class Store(Base):\n    def method_2(self, items):\n")
    compile(method.shown, "<region>", "exec")  # what the model sees is valid Python


def test_a_rename_picks_the_units_that_use_the_name_and_only_those():
    text = BIG_CLASS.replace("value_3 = items[3] + 4", "value_3 = Base.shared + 4")
    picked = pick(text, parse_intent("rename Base to Root"))
    lines = text.splitlines()
    assert [lines[u.start] for u in picked] == ["class Store(Base):", "    def method_4(self, items):"]
    # A use in a string or as another object's attribute is not a use: not sent.
    text = "class Base:\n    pass\n\n\nx = 'Base'\ny = obj.Base\n"
    assert [u.start for u in pick(text, parse_intent("rename Base to Root"))] == [0]


def test_a_rename_picks_the_names_entry_in_all():
    text = '__all__ = ["Base", "Store"]\nVERSION = 1\n\n\nclass Base:\n    pass\n'
    assert [u.start for u in pick(text, parse_intent("rename Base to Root"))] == [0, 4]
    assert [u.start for u in pick(text, parse_intent("rename VERSION to RELEASE"))] == [1]


def test_a_region_that_is_not_picked_never_changes():
    text = BIG_CLASS
    regions = regions_for(text, parse_intent("rename the function use to apply_store"))
    assert [r.label for r in regions] == [f"lines {len(text.splitlines()) - 1}-{len(text.splitlines())}"]
    answer = regions[0].own_text.replace("def use", "def apply_store")
    new = splice(text, [(regions[0], answer)])
    assert new.splitlines()[:-2] == text.splitlines()[:-2]
    assert check_intent("a.py", text, new, parse_intent("rename the function use to apply_store")).ok is True


def test_training_regions_are_the_regions_inference_sends():
    """One path: a region example's prompt text is exactly a region `hsedit apply` would send,
    and its target passes the instruction check on that region."""
    text = Path(textwrap.__file__).read_text(encoding="utf-8")
    edit = rename_everywhere(text, random.Random(3), "variable")
    assert edit is not None
    examples = region_examples(edit, "textwrap.py", "train", random.Random(0))
    assert examples
    shown = {r.shown for r in regions_for(edit.before, parse_intent(edit.instruction))}
    intent = parse_intent(edit.instruction)
    for example in examples:
        assert isinstance(example, Example) and example.scope == "region"
        assert example.before in shown
        assert check_intent("textwrap.py", example.before, example.after, intent).ok is True


def test_a_deletion_is_shown_with_a_neighbour():
    text = "def keep():\n    return 1\n\n\ndef drop():\n    return 2\n"
    regions = regions_for(text, parse_intent("delete the function drop"))
    assert len(regions) == 1 and regions[0].shown == text  # `keep` is shown beside it, so the answer is not empty
    examples = region_examples(Edit("delete_function", "delete the function drop", text, "def keep():\n    return 1\n"),
                               "a.py", "train", random.Random(0))
    assert [e.after for e in examples] == ["def keep():\n    return 1\n"]


def test_a_deleted_definition_too_large_for_one_region_is_sent_whole_and_never_cut_finer():
    # `drop` is over the budget (80 here): cut, its header would be shown read-only above its
    # statements, and no answer could delete it
    drop = "def drop(items):\n" + "".join(f"    value_{j} = items[{j}] + 1\n" for j in range(14)) + "    return value_0\n"
    text = "def keep():\n    return 1\n\n\n" + drop + "\n\nkeep()\n"
    assert estimated_tokens(drop) > 80
    intent = parse_intent("delete the function drop")
    (region,) = regions_for(text, intent, budget=80)
    assert region.shown == text.removesuffix("\n\nkeep()\n")  # `keep` beside it, `drop` whole
    assert finer_regions(text, region, intent) is None  # asked again as it is (sampled)
    # the same file, any other intent: cut at the same budget
    assert len(regions_for(text, parse_intent("rename value_3 to v"), budget=80)[0].shown.splitlines()) < 10


def _documented_function(docstring_lines: int, body_lines: int = 80) -> str:
    doc = '    """Scale every item.\n\n' + "".join(f"    >>> scale([{k}], 2)\n" for k in range(docstring_lines - 3)) + '    """\n'
    body = "".join(f"    part_{j} = items[{j}] * factor\n" for j in range(body_lines))
    return "def scale(items, factor):\n" + doc + body + "    return items\n\n\nscale([1], 2)\n"


def test_a_long_docstring_is_not_sent_with_a_header_the_intent_changes():
    text = _documented_function(12)
    intent = parse_intent("rename factor to ratio")
    regions = regions_for(text, intent)
    lines = text.splitlines(keepends=True)
    assert regions[0].own_text == lines[0]  # the signature alone: not the 12 lines of docstring under it
    assert not any('"""' in r.own_text or ">>>" in r.own_text for r in regions)
    answers = [(r, r.own_text.replace("factor", "ratio")) for r in regions]
    new = splice(text, answers)
    assert check_intent("a.py", text, new, intent).ok is True
    assert new.count(">>> scale") == 9  # the docstring, never sent, is still there


def test_a_short_docstring_stays_with_its_header():
    text = _documented_function(3)
    first = regions_for(text, parse_intent("rename factor to ratio"))[0]
    assert first.own_text.startswith("def scale(items, factor):\n") and '"""' in first.own_text


@pytest.mark.parametrize("docstring_lines", [12, 250], ids=["within-budget", "over-budget"])
def test_a_free_form_edit_of_a_header_is_sent_with_its_docstring(docstring_lines):
    text = _documented_function(docstring_lines)
    regions = regions_for(text, parse_intent("document what `scale` returns"))
    first = regions[0]
    assert first.own_text.startswith("def scale(items, factor):\n")
    assert first.own_text.count(">>> scale") == docstring_lines - 3  # header and docstring are one region again


def test_a_failing_region_is_cut_finer_with_a_header_kept_with_its_docstring():
    text = _documented_function(12, body_lines=12).split("\n\n\n")[0] + "\n"  # the function alone: one unit
    free = parse_intent("document what `scale` returns")
    (whole,) = regions_for(text, free)
    assert whole.own_text.startswith("def scale(") and "return items" in whole.own_text
    (piece,) = finer_regions(text, whole, free)  # the statements that name `scale`: its header, with its docstring
    assert piece.own_text.startswith("def scale(items, factor):\n") and piece.own_text.count(">>> scale") == 9
    assert finer_regions(text, piece, free) is None  # no finer cut parts them: asked again as it is
    rename = parse_intent("rename factor to ratio")
    pieces = finer_regions(text, regions_for(text, rename)[0], rename)
    assert pieces[0].own_text == "def scale(items, factor):\n"  # a rename's header goes alone
    assert not any(">>>" in p.own_text for p in pieces)


def _long_signature() -> str:
    params = "".join(f"        option_{k}: int = {k},\n" for k in range(30))
    return ("class Kernel:\n    def radix_pass(\n        self,\n        *,\n" + params + "        storage,\n        bits: int,\n    ):\n"
            "        hist = storage.hist\n        return hist\n\n\ndef other():\n    return 1\n")


def test_a_rename_no_cut_splits_is_asked_again_line_by_line():
    """A long signature and its first statement are never cut apart: past the finest cut, a
    rename sends each run of lines with a use alone, dedented, and splices the answer back."""
    text = _long_signature()
    rename = parse_intent("rename storage to new_storage")
    (region,) = regions_for(text, rename)
    pieces = finer_regions(text, region, rename)
    assert [p.shown for p in pieces] == ["storage,\n", "hist = storage.hist\n"]
    assert all(finer_regions(text, p, rename) is None for p in pieces)  # nothing finer than a line
    answers = [(p, own_part(p, p.shown.replace("storage", "new_storage"))) for p in pieces]
    new = splice(text, answers)
    assert "        new_storage,\n" in new and "        hist = new_storage.hist\n" in new
    assert check_intent("a.py", text, new, rename).ok is True
    free = parse_intent("document what `radix_pass` returns")
    assert finer_regions(text, regions_for(text, free)[0], free) is None  # renames only


def test_a_use_in_a_regions_head_is_left_to_the_heads_own_region():
    """A region under a head that uses the name: its own lines are right when they are, though
    the head, spliced as it was, still has the old name (its own region renames it)."""
    head = "def scale(items, factor):\n"
    own = "    return [item * factor for item in items]\n"
    rename = parse_intent("rename factor to ratio")
    answer = head + own.replace("factor", "ratio")
    assert check_intent("a.py", head + own, answer, rename).ok is False
    assert check_intent("a.py", head + own, answer, rename, judged_from=len(head)).ok is True
    wrong = head + own.replace("factor", "ratio * 2")
    assert check_intent("a.py", head + own, wrong, rename, judged_from=len(head)).ok is False


def test_a_line_piece_comes_back_with_exactly_the_whitespace_it_had():
    """Continuation lines may mix tabs and spaces inside a bracket: a piece strips only what its
    lines share, so an answer that repeats it is spliced back byte for byte."""
    text = _long_signature().replace("        storage,\n", "        storage=(storage,\n\tstorage),\n")
    rename = parse_intent("rename storage to new_storage")
    pieces = finer_regions(text, regions_for(text, rename)[0], rename)
    assert any("\t" in p.own_text for p in pieces)
    assert all(own_part(p, p.shown) == p.own_text for p in pieces)
