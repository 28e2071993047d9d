"""The training data's targets are right: edits parse and do exactly what they say."""

import ast
import io
import random
import tokenize

import pytest

from hsedit.train.finetune import edits
from hsedit.train.finetune.dataset import HELDOUT, chunks, load, split_of

SOURCE = '''"""Totals for the report; total_value is documented here."""

RATE = 3
LABEL = "items"


def total_value(items, rate=RATE):
    # total_value sums prices
    count = 0
    for item in items:
        count += item.price * rate
    print("total_value: %s for %d items" % (count, len(items)))
    return count


class Report:
    def render(self, items):
        value = total_value(items, rate=2)
        return "%s: %.2f" % (LABEL, value)


def typed(a: int, b: str = "x") -> str:
    return b * a
'''


def names(source):
    return [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.NAME]


def test_rename_touches_names_only_never_strings_comments_or_keyword_arguments():
    after = edits.rename_tokens(SOURCE, "total_value", "grand_total")
    assert "total_value" not in names(after)
    assert names(after).count("grand_total") == 2
    assert '"""Totals for the report; total_value is documented here."""' in after
    assert "# total_value sums prices" in after and '"total_value: %s' in after
    rated = edits.rename_tokens(SOURCE, "rate", "factor")
    assert "total_value(items, rate=2)" in rated  # a keyword argument of a call stays
    ast.parse(after)


def test_rename_refuses_a_name_used_inside_an_fstring():
    assert edits.rename_tokens("x = 1\nprint(f'{x}')\n", "x", "y") is None


@pytest.mark.parametrize("seed", range(8))
def test_generated_edits_parse_and_change_the_code(seed):
    for kind, generator in edits.GENERATORS.items():
        edit = generator(SOURCE, random.Random(seed))
        if edit is None:
            continue
        assert edit.before != edit.after, kind
        ast.parse(edit.before)
        ast.parse(edit.after)
        assert edit.instruction, kind


def test_local_rename_stays_inside_its_function():
    functions = [n for n in ast.walk(ast.parse(SOURCE)) if isinstance(n, ast.FunctionDef)]
    for seed in range(20):
        edit = edits.rename_local(SOURCE, random.Random(seed))
        before, after = edit.before.splitlines(), edit.after.splitlines()
        changed = [i + 1 for i, (a, b) in enumerate(zip(before, after)) if a != b]
        assert len(before) == len(after) and changed
        owner = [f for f in functions if f.lineno <= changed[0] <= f.end_lineno][-1]
        assert all(owner.lineno <= row <= owner.end_lineno for row in changed)
        assert f"in {owner.name}" in edit.instruction or f"`{owner.name}`" in edit.instruction or owner.name in edit.instruction


def test_percent_formatting_becomes_an_equal_fstring():
    source = 'def f(name, n, x):\n    return "%s has %d at %.2f (%r)" % (name, n, x, name)\n'
    edit = edits.percent_to_fstring(source, random.Random(0))
    assert 'f"{name} has {n} at {x:.2f} ({name!r})"' in edit.after
    scope_before, scope_after = {}, {}
    exec(edit.before, scope_before)
    exec(edit.after, scope_after)
    assert scope_before["f"]("a", 3, 1.5) == scope_after["f"]("a", 3, 1.5)


def test_type_hints_are_stripped_from_the_input_and_kept_in_the_target():
    edit = edits.add_type_hints(SOURCE, random.Random(0))
    assert edit.after == SOURCE
    assert "def typed(a, b=\"x\"):" in edit.before


def test_delete_function_removes_only_an_unused_function():
    edit = edits.delete_function(SOURCE, random.Random(0))
    assert "typed" in edit.instruction
    assert "def typed" not in edit.after and "def total_value" in edit.after
    assert "\n\n\n\n" not in edit.after


def test_debug_print_is_in_the_input_only():
    edit = edits.remove_debug_print(SOURCE, random.Random(3))
    assert edit.after == SOURCE
    assert edit.before.count("print(") == SOURCE.count("print(") + 1


def test_snippet_merge_shows_the_changed_region_between_markers():
    before = "".join(f"line_{i} = {i}\n" for i in range(30))
    after = before.replace("line_15 = 15", "line_15 = 99")
    snippet = edits.update_snippet(before, after)
    assert snippet.startswith(edits.EXISTING_CODE) and snippet.rstrip().endswith(edits.EXISTING_CODE)
    assert "line_15 = 99" in snippet and "line_0 = 0" not in snippet


def test_chunks_parse_alone_and_keep_to_their_size():
    source = "\n\n".join(f"def f{i}(x):\n    y = x + {i}\n    return y\n" for i in range(40))
    for chunk in chunks(source, random.Random(0)):
        ast.parse(chunk)
        assert 12 <= chunk.count("\n") <= 45


def test_shipped_heldout_set_comes_from_held_out_files_only():
    examples = load(HELDOUT)
    assert len(examples) >= 50
    assert all(e.split == "eval" and split_of(e.path) == "eval" for e in examples)
    assert {e.kind for e in examples} >= {"rename_function", "rename_local", "snippet_merge"}
