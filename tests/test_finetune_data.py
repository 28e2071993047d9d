"""The training data's targets are right: edits parse and do exactly what they say."""

import ast
import io
import random
import re
import tokenize
from collections import Counter

import pytest

from hsedit.train.finetune import edits
from hsedit.train.finetune.dataset import (
    HELDOUT,
    HELDOUT_FILES,
    MAX_WHOLE_FILE_LINES,
    MAX_WHOLE_FILE_TOKENS,
    MIN_WHOLE_FILE_LINES,
    SHORT_FILE_LINES,
    Example,
    chunks,
    estimated_tokens,
    generate_whole_files,
    heldout_whole_files,
    load,
    split_of,
    whole_file,
)
from hsedit.train.finetune.evaluate import KindReport, overall, score

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


def test_a_function_called_only_inside_an_f_string_is_not_deleted():
    source = 'def name_of(x):\n    return type(x).__name__\n\n\ndef describe(x):\n    return f"a {name_of(x)}"\n'
    for seed in range(10):
        edit = edits.delete_function(source, random.Random(seed))
        assert edit is None or "def name_of" in edit.after


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


# -- whole files ---------------------------------------------------------------------------
WHOLE_FILE = '''"""Buffers of a fixed size; `size` in this docstring stays as it is."""

import os

MAX_SIZE = 4096
DEFAULT_NAME = "buffer"


def clamp(size, max_size=MAX_SIZE):
    # a size above max_size is cut to max_size
    if size > max_size:
        return max_size
    return size


def describe(size):
    label = "size=%d" % size
    return label + " of " + os.sep


def resize(size, factor):
    sizes = [clamp(size * factor), size]
    return max(sizes)


class Buffer:
    def __init__(self, size):
        self.capacity = clamp(size)
        self.items = []

    def push(self, item):
        if len(self.items) >= self.capacity:
            raise ValueError("buffer of size %d is full" % self.capacity)
        self.items.append(item)
        return len(self.items)

    def drain(self):
        drained, self.items = self.items, []
        return drained


def fill(buffer, values):
    total = 0
    for value in values:
        total = buffer.push(value)
    return total


def fill_all(buffers, values):
    totals = [fill(buffer, values) for buffer in buffers]
    return sum(totals), Buffer(len(totals))


def refill(values):
    return fill(Buffer(len(values)), values)
'''


def tokens(source):
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def renamed(before, after):
    """The (old, new) NAME pairs between two sources that differ in nothing else."""
    a, b = tokens(before), tokens(after)
    assert len(a) == len(b)
    pairs = set()
    for x, y in zip(a, b):
        if x.string != y.string:
            assert x.type == y.type == tokenize.NAME, (x, y)
            pairs.add((x.string, y.string))
    return pairs


def assert_renamed_everywhere(before, after):
    ((old, new),) = renamed(before, after)
    assert old not in names(after) and names(after).count(new) == names(before).count(old)
    assert len(after.splitlines()) == len(before.splitlines())
    ast.parse(after)
    return old, new


def test_rename_everywhere_leaves_longer_names_strings_and_comments_alone():
    after = edits.rename_tokens(WHOLE_FILE, "size", "length")
    assert_renamed_everywhere(WHOLE_FILE, after)
    assert "max_size" in names(after) and "sizes" in names(after) and "MAX_SIZE" in names(after)
    assert "# a size above max_size is cut to max_size" in after
    assert '"size=%d"' in after and '"buffer of size %d is full"' in after
    assert "`size` in this docstring" in after


@pytest.mark.parametrize("what", ["function", "class", "variable"])
def test_whole_file_renames_change_every_use_and_nothing_else(what):
    renamed_names = set()
    for seed in range(12):
        edit = edits.rename_everywhere(WHOLE_FILE, random.Random(seed), what)
        assert edit.kind == f"rename_{what}"
        old, new = assert_renamed_everywhere(edit.before, edit.after)
        assert old in edit.instruction and new in edit.instruction
        renamed_names.add(old)
    # max_size is also a keyword-argument position (its default) and capacity an attribute:
    # renaming "everywhere" would be ambiguous, so neither is ever picked.
    assert not renamed_names & {"max_size", "capacity", "items", "os", "self"}
    if what == "variable":
        assert "size" in renamed_names  # the name with look-alikes (max_size, sizes, comments, strings)


def test_whole_file_renames_skip_names_that_a_string_spells_as_code():
    looked_up = WHOLE_FILE + '\n\nHOOKS = [getattr(sys.modules[__name__], "clamp"), getattr(sys.modules[__name__], "fill")]\n'
    for seed in range(12):  # clamp and fill are the only functions used often enough to rename
        assert edits.rename_everywhere(looked_up, random.Random(seed), "function") is None


def test_whole_file_renames_rename_the_names_in_all():
    exported = '__all__ = ["clamp", "fill"]\n' + WHOLE_FILE
    for seed in range(12):
        edit = edits.rename_everywhere(exported, random.Random(seed), "function")
        head, body = edit.after.split("\n", 1)
        old, new = assert_renamed_everywhere(WHOLE_FILE, body)
        assert head == f'__all__ = ["clamp", "fill"]'.replace(f'"{old}"', f'"{new}"')
        assert old in ("clamp", "fill")


def test_whole_file_renames_are_asked_for_in_many_ways():
    instructions = set()
    for seed in range(60):
        edit = edits.rename_everywhere(WHOLE_FILE, random.Random(seed), "variable")
        ((old, new),) = renamed(edit.before, edit.after)
        instructions.add(edit.instruction.replace(old, "OLD").replace(new, "NEW"))
    assert len(instructions) >= 8
    assert "Rename `OLD` to `NEW` everywhere in this file." in instructions
    assert "call the variable NEW instead of OLD" in instructions
    assert "rename OLD to NEW" in instructions


def test_no_change_instructions_do_not_apply_and_keep_the_file():
    absent = {f"{v}_{n}" for v in edits.ABSENT_VERBS for n in edits.ABSENT_NOUNS} | set(edits.ABSENT_NOUNS)
    with_print = WHOLE_FILE.replace("    return total\n", "    print(total)\n    return total\n")
    assert with_print != WHOLE_FILE
    for seed in range(30):
        for source in (WHOLE_FILE, with_print):
            edit = edits.no_change(source, random.Random(seed))
            assert edit.kind == "no_change" and edit.before == edit.after == source
            mentioned = set(re.findall(r"\w+", edit.instruction)) & absent
            assert not mentioned & set(re.findall(r"\w+", source))
            assert "%" not in edit.instruction  # both files have % formatting
            if source is with_print:
                assert "print" not in edit.instruction


def test_whole_files_keep_to_the_line_and_token_bounds():
    assert whole_file(WHOLE_FILE) == WHOLE_FILE
    assert whole_file(SOURCE) is None  # under MIN_WHOLE_FILE_LINES
    module = "".join(f"def f{i}(x):\n    y = x + {i}\n    return y\n\n\n" for i in range(80))
    top = whole_file(module)
    assert module.startswith(top) and MIN_WHOLE_FILE_LINES <= len(top.splitlines()) <= MAX_WHOLE_FILE_LINES
    ast.parse(top)
    wide = "".join(f"value_{i} = {'x' * 90!r}\n" for i in range(150))  # few lines, many tokens
    assert estimated_tokens(wide) > MAX_WHOLE_FILE_TOKENS
    assert estimated_tokens(whole_file(wide)) <= MAX_WHOLE_FILE_TOKENS
    one_statement = "VALUES = [\n" + "    1,\n" * 250 + "]\n"
    assert whole_file(one_statement) is None


def test_short_whole_files_are_cut_to_their_own_bounds():
    module = "".join(f"def f{i}(x):\n    y = x + {i}\n    return y\n\n\n" for i in range(80))
    top = whole_file(module, SHORT_FILE_LINES)
    assert module.startswith(top) and SHORT_FILE_LINES[0] <= len(top.splitlines()) <= SHORT_FILE_LINES[1]
    examples = generate_whole_files(seed=0, limit_per_kind=2, files=synthetic_files(), bounds=SHORT_FILE_LINES)
    assert examples
    assert all(SHORT_FILE_LINES[0] <= len(e.before.splitlines()) <= SHORT_FILE_LINES[1] for e in examples)


def test_class_renames_favour_classes_other_classes_extend():
    source = "".join(
        f"class Leaf{i}:\n    pass\n\n\nx{i} = Leaf{i}()\ny{i} = Leaf{i}()\n\n\n" for i in range(6)
    ) + "class Base:\n    pass\n\n\nclass Sub(Base):\n    pass\n\n\nz = Base()\n"
    renamed = Counter(
        re.search(r"\bBase\b", edits.rename_everywhere(source, random.Random(seed), "class").after) is None
        for seed in range(200)
    )
    base_share = renamed[True] / 200
    # Base has 3 uses against each leaf's 3: a seventh of the picks unweighted, 3/9 weighted.
    assert base_share > 0.25


def synthetic_files(count=40):
    """Whole-file-sized modules under paths of both splits."""
    helper = "\n\ndef helper_{i}(items):\n    count = len(items)\n    return count + {i}\n"
    extra = "".join(helper.format(i=i) for i in range(4))
    return [(f"pkg/module_{i}.py", WHOLE_FILE.replace("Buffer", f"Buffer{i}") + extra) for i in range(count)]


def test_whole_file_examples_keep_eval_files_out_of_train():
    files = synthetic_files()
    assert {split_of(path) for path, _ in files} == {"train", "eval"}
    examples = generate_whole_files(seed=0, limit_per_kind=4, files=files)
    assert {e.split for e in examples} == {"train", "eval"}
    for example in examples:
        assert example.split == split_of(example.path) and example.scope == "file"
        assert MIN_WHOLE_FILE_LINES <= len(example.before.splitlines()) <= MAX_WHOLE_FILE_LINES
        assert estimated_tokens(example.before) <= MAX_WHOLE_FILE_TOKENS
        assert (example.before == example.after) == (example.kind == "no_change")
    train = {e.path for e in examples if e.split == "train"}
    assert not train & {e.path for e in examples if e.split == "eval"}
    assert heldout_whole_files(seed=3, files=files) == heldout_whole_files(seed=3, files=files)
    assert {e.split for e in heldout_whole_files(seed=3, files=files)} == {"eval"}


def test_shipped_whole_file_heldout_set():
    assert HELDOUT_FILES.stat().st_size < 1_500_000
    examples = load(HELDOUT_FILES)
    assert 40 <= len(examples) <= 80
    renames = {"rename_function", "rename_class", "rename_local", "rename_variable"}
    assert {e.kind for e in examples} >= renames | {"no_change"}
    assert sum(e.kind.startswith("rename_") for e in examples) >= len(examples) / 2
    for example in examples:
        assert example.split == "eval" and split_of(example.path) == "eval" and example.scope == "file"
        assert MIN_WHOLE_FILE_LINES <= len(example.before.splitlines()) <= MAX_WHOLE_FILE_LINES
        assert estimated_tokens(example.before) <= MAX_WHOLE_FILE_TOKENS
        ast.parse(example.after)
        if example.kind in ("rename_function", "rename_class", "rename_variable"):
            assert_renamed_everywhere(example.before, example.after)
        if example.kind == "no_change":
            assert example.before == example.after
    assert {e.scope for e in load(HELDOUT)} == {"chunk"}  # rows written before scope existed load as chunks


def test_scores_count_answers_cut_off_by_max_tokens():
    before, after = "a = 1\nc = a\n", "b = 1\nc = b\n"
    example = Example("rename_variable", "m.py", "rename a to b", before, after, None, "eval")
    done = score(example, example.after)
    cut = score(example, "b = 1\nc = b\nc = b\nc =", cut_off=True)
    assert not done.cut_off and cut.cut_off and done.exact and not cut.exact
    report = KindReport("rename_variable", [done, cut])
    assert report.as_dict()["cut_off"] == 0.5
    assert overall([report, KindReport("no_change", [score(example, example.after)])])["cut_off"] == 0.333


def test_scores_count_the_file_answered_unchanged_only_where_it_should_change():
    before, after = "a = 1\nc = a\n", "b = 1\nc = b\n"
    rename = Example("rename_variable", "m.py", "rename a to b", before, after, None, "eval")
    keep = Example("no_change", "m.py", "rename q to r", before, before, None, "eval")
    copied, wrong = score(rename, before), score(rename, "b = 1\nc = a\n")
    assert copied.answered_unchanged and not wrong.answered_unchanged and not score(rename, after).answered_unchanged
    assert not score(keep, before).answered_unchanged  # the right answer there
    assert KindReport("rename_variable", [copied, wrong]).as_dict()["answered_unchanged"] == 0.5


def test_a_keyword_argument_after_a_line_break_is_not_renamed():
    source = "def f(value):\n    return g(\n        value=value,  # keep\n        other=1)\n"
    assert edits.rename_tokens(source, "value", "amount") == (
        "def f(amount):\n    return g(\n        value=amount,  # keep\n        other=1)\n"
    )


def test_edits_after_non_ascii_text_land_on_their_characters():
    # ast counts columns in UTF-8 bytes; the constant after "é" must still be replaced whole.
    changed = [edits.set_constant('GREETING = "héllo"; LIMIT = 5\n', random.Random(seed)) for seed in range(6)]
    original = {"GREETING": "héllo", "LIMIT": 5}
    for edit in changed:
        values = {node.targets[0].id: node.value.value for node in ast.parse(edit.after).body}
        assert values.keys() == original.keys()
        assert sum(values[name] != original[name] for name in original) == 1, edit.after  # one constant, whole
    stripped = edits.add_type_hints('def f(naïve: int, x: int = 5) -> int:\n    return x\n', random.Random(0))
    assert stripped.before == "def f(naïve, x=5):\n    return x\n"


def test_stripping_hints_leaves_strings_and_comments_alone():
    source = 'def f(x: int = 5, *, y: str = "a = b",  # a = comment\n      z: float) -> int:\n    return x\n'
    edit = edits.add_type_hints(source, random.Random(0))
    assert edit.before == 'def f(x=5, *, y="a = b",  # a = comment\n      z):\n    return x\n'
    assert edit.after == source


def test_every_training_kind_is_named_after_the_intent_its_instruction_parses_to():
    """A training kind is its intent's kind (`set_constant`), or that kind and what it names
    (`rename_local`, `delete_function`): the evaluation tables and the check's verdicts agree."""
    from hsedit.edit.intent import parse_intent

    for kind, make in edits.FILE_GENERATORS.items():
        if kind == "no_change":
            continue
        made = (make(WHOLE_FILE + SOURCE, random.Random(seed)) for seed in range(30))
        edit = next((e for e in made if e is not None), None)
        assert edit is not None, kind
        intent = parse_intent(edit.instruction, edit.update).kind
        assert kind == intent or kind.startswith(intent + "_"), (kind, intent)
