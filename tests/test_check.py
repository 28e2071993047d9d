"""The instruction check (hsedit/edit/check.py): right answers pass, wrong ones fail with a reason
that says what is wrong, and what it cannot judge is unchecked. No engine: answers are written
here, as a model would give them (right, unchanged, half-done, with a stray change)."""

import json
from pathlib import Path

import pytest

from hsedit.edit.check import check_edit, same_rename, undefined_globals

CODE = '''"""Inventory helpers."""

LIMIT = 10
NAME = "stock"


def total_value(items, rate):
    """Sum of total_value over items."""
    total = 0
    for item in items:
        total += item.price * rate  # price per item
    print("DEBUG", total)
    return total


class Shelf:
    def __init__(self, items):
        self.items = items

    def count(self):
        return len(self.items)

    def value(self):
        return total_value(self.items, 1.0) + self.count()


def report(shelf):
    print("report: %s items, %.2f value" % (shelf.count(), shelf.value()))
    return total_value(shelf.items, LIMIT)
'''


def verdict(answer, instruction, code=CODE, update=None, path="inventory.py"):
    return check_edit(path, code, answer, instruction, update)


# -- renames ---------------------------------------------------------------------------------
RENAMED = CODE.replace("def total_value", "def inventory_value").replace("return total_value", "return inventory_value")


@pytest.mark.parametrize("instruction", [
    "rename the function total_value to inventory_value",
    "Rename total_value to inventory_value.",
    "Please rename the function `total_value` to `inventory_value` and update every use of it.",
    "change the name of the function total_value to inventory_value",
    "total_value should be called inventory_value; update all references",
    "rename total_value -> inventory_value",
    "Rename `total_value` to `inventory_value` everywhere in this file.",
    "call the function inventory_value instead of total_value",
    "replace every use of total_value with inventory_value",
    "rename total_value to inventory_value throughout the file",
    "use the name inventory_value for the function total_value",
])
def test_every_rename_phrasing_is_understood_and_a_right_rename_passes(instruction):
    result = verdict(RENAMED, instruction)
    assert result.kind == "rename" and result.ok is True, result.reason
    assert "all 3 uses" in result.reason


def test_a_rename_may_follow_into_strings_and_comments_or_not():
    also_prose = RENAMED.replace("Sum of total_value", "Sum of inventory_value")
    assert verdict(also_prose, "rename total_value to inventory_value").ok is True


def test_two_renames_that_differ_only_in_prose_are_the_same_rename():
    # The three held-out "wrong successes" of 2026-12-03 were this: the answer also renamed the
    # name in a docstring or comment the expected answer left.
    expected = 'def dn_match(dn):\n    """Match dn."""\n    # dn.split()\n    return dn.lower()\n'
    answer = 'def dn_match(the_dn):\n    """Match the_dn."""\n    # dn.split()\n    return the_dn.lower()\n'
    assert check_edit("a.py", expected.replace("the_dn", "dn"), answer, "rename the variable dn to the_dn").ok
    expected = expected.replace("(dn)", "(the_dn)").replace("dn.lower", "the_dn.lower")
    assert same_rename(expected, answer, "dn", "the_dn")
    assert same_rename(answer, expected, "dn", "the_dn")
    assert not same_rename(expected, answer.replace("Match the_dn", "Match a_dn"), "dn", "the_dn")
    assert not same_rename(expected, answer.replace("the_dn.lower", "dn.lower"), "dn", "the_dn")  # a use, not prose
    assert not same_rename(expected, answer.replace("return", "return  1 +"), "dn", "the_dn")


def test_missed_uses_and_stray_changes_are_named_with_their_lines():
    half = CODE.replace("def total_value", "def inventory_value").replace("LIMIT = 10", "LIMIT = 11")
    result = verdict(half, "rename total_value to inventory_value")
    assert result.ok is False
    assert "2 of 3 uses of `total_value` not renamed (line 24, 29)" in result.reason
    assert "line 3 changes `10` to `11`, which the rename does not touch" in result.reason


def test_a_dropped_line_is_reported_not_just_a_length_mismatch():
    # The typer colors.py failure: the line after the name dropped, the wrong name renamed.
    code = 'BLACK = "black"\nRED = "red"\nGREEN = "green"\n'
    answer = 'BLACK = "black"\nGREY = "green"\n'
    result = verdict(answer, "rename RED to ROSE", code=code)
    assert result.ok is False
    assert "1 of 1 uses of `RED` not renamed" not in result.reason  # RED's line is gone, not kept
    assert "line 2" in result.reason


def test_an_unchanged_answer_to_a_rename_of_a_name_that_occurs_fails():
    result = verdict(CODE, "rename total_value to inventory_value")
    assert result.ok is False and "3 of 3 uses" in result.reason


def test_a_rename_of_an_absent_name_is_done_by_the_file_as_it_is():
    assert verdict(CODE, "rename the variable config to settings").ok is True
    changed = verdict(RENAMED, "rename the variable config to settings")
    assert changed.ok is False and "does not occur" in changed.reason


def test_a_scoped_rename_touches_only_its_function():
    right = CODE.replace("    total = 0\n    for", "    acc = 0\n    for").replace("total += item", "acc += item") \
        .replace('print("DEBUG", total)', 'print("DEBUG", acc)').replace("return total\n", "return acc\n")
    for instruction in ("in total_value, rename the local variable total to acc",
                        "Rename the variable `total` in `total_value` to `acc`.",
                        "rename total to acc inside total_value",
                        "total_value: the variable total should be named acc"):
        assert verdict(right, instruction).ok is True, instruction
    too_far = right.replace("return total_value(shelf", "return acc_value(shelf")
    assert verdict(too_far, "rename total to acc inside total_value").ok is False


def test_a_rename_of_an_exported_name_renames_it_in_all():
    code = '__all__ = ["total_value", "Shelf"]\n__all__.append("total_value")\n' + CODE
    code_renamed = code.replace("total_value", "inventory_value")
    assert verdict(code_renamed, "rename total_value to inventory_value", code=code).ok is True
    kept = code_renamed.replace('__all__.append("inventory_value")', '__all__.append("total_value")')
    result = verdict(kept, "rename total_value to inventory_value", code=code)
    assert result.ok is False and "`__all__` still lists `total_value` (line 2)" in result.reason
    # Renamed in one function only, the module's name stays: so does its entry.
    local = code.replace("    total = 0\n    for", "    acc = 0\n    for").replace("total += item", "acc += item") \
        .replace('print("DEBUG", total)', 'print("DEBUG", acc)').replace("return total\n", "return acc\n")
    assert verdict(local, "rename total to acc inside total_value", code=code).ok is True


def test_a_method_rename_must_follow_its_attribute_uses():
    code = CODE
    only_def = code.replace("def count(self)", "def size(self)")
    result = verdict(only_def, "rename the method count to size", code=code)
    assert result.ok is False and "2 of 3 uses of `count` not renamed" in result.reason
    everywhere = only_def.replace("self.count()", "self.size()").replace("shelf.count()", "shelf.size()")
    assert verdict(everywhere, "rename the method count to size", code=code).ok is True


def test_renaming_an_unrelated_attribute_or_keyword_is_not_passed():
    code = "def f(items):\n    return g(items=items).items\n"
    answer = "def f(entries):\n    return g(items=entries).items\n"
    assert verdict(answer, "rename items to entries", code=code).ok is True
    keyword = verdict("def f(entries):\n    return g(entries=entries).items\n", "rename items to entries", code=code)
    assert keyword.ok is None and "keyword" in keyword.reason
    attribute = verdict("def f(entries):\n    return g(items=entries).entries\n", "rename items to entries", code=code)
    assert attribute.ok is None and "attribute" in attribute.reason


# -- constants -------------------------------------------------------------------------------
@pytest.mark.parametrize("instruction", [
    "set LIMIT to 32", "change LIMIT to 32", "Set the constant `LIMIT` to 32.", "LIMIT should be 32", "LIMIT = 32"])
def test_set_a_constant(instruction):
    assert verdict(CODE.replace("LIMIT = 10", "LIMIT = 32"), instruction).ok is True
    wrong_value = verdict(CODE.replace("LIMIT = 10", "LIMIT = 23"), instruction)
    assert wrong_value.ok is False and "sets `LIMIT` to 23, not 32" in wrong_value.reason
    assert verdict(CODE, instruction).ok is False


def test_a_constant_set_with_a_stray_change_fails_and_string_values_compare_as_values():
    stray = CODE.replace("LIMIT = 10", "LIMIT = 32").replace("rate  #", "rate * 2  #")
    result = verdict(stray, "set LIMIT to 32")
    assert result.ok is False and "line 11" in result.reason
    assert verdict(CODE.replace('NAME = "stock"', "NAME = 'shelf'"), 'set NAME to "shelf"').ok is True


# -- deletions -------------------------------------------------------------------------------
DELETED = CODE.replace('''def report(shelf):
    print("report: %s items, %.2f value" % (shelf.count(), shelf.value()))
    return total_value(shelf.items, LIMIT)
''', "")


@pytest.mark.parametrize("instruction", [
    "delete the function report", "Remove `report`; it is not used.", "remove the report function", "drop report from this file"])
def test_delete_a_function(instruction):
    assert verdict(DELETED, instruction).ok is True
    unchanged = verdict(CODE, instruction)
    assert unchanged.ok is False and "still there" in unchanged.reason
    also = verdict(DELETED.replace("LIMIT = 10\n", ""), instruction)
    assert also.ok is False and "loses `LIMIT = 10`" in also.reason


def test_deleting_an_absent_function_is_nothing_to_do():
    assert verdict(CODE, "delete the function load_config").ok is True


# -- debug prints ----------------------------------------------------------------------------
def test_remove_the_debug_print():
    code = CODE.replace('    print("report: %s items, %.2f value" % (shelf.count(), shelf.value()))\n', "")
    right = code.replace('    print("DEBUG", total)\n', "")
    for instruction in ("remove the debug print", "Delete the leftover print statement.",
                        "remove the debugging print in total_value", "get rid of the print I left in total_value"):
        assert verdict(right, instruction, code=code).ok is True, instruction
        assert verdict(code, instruction, code=code).ok is False, instruction
    both = verdict(right.replace("    return total\n", "    return 0\n"), "remove the debug print", code=code)
    assert both.ok is False and "more than print statements" in both.reason


def test_which_of_several_prints_is_the_debug_one_is_not_guessed():
    one_removed = CODE.replace('    print("DEBUG", total)\n', "")
    result = verdict(one_removed, "remove the debug print")
    assert result.ok is None and "1 of 2" in result.reason
    two_removed = verdict(one_removed.replace('    print("report: %s items, %.2f value" % (shelf.count(), shelf.value()))\n', ""),
                          "remove the debug print")
    assert two_removed.ok is False and "asks for one" in two_removed.reason
    assert verdict(CODE, "remove debug print statements").ok is None  # are they debug prints? not checked


# -- parameters ------------------------------------------------------------------------------
def test_add_a_parameter():
    right = CODE.replace("def report(shelf):", "def report(shelf, verbose=False):")
    for instruction in ("add a parameter verbose with default False to report",
                        "Add an optional `verbose=False` argument to `report`.",
                        "give report a new keyword parameter verbose (default False)"):
        assert verdict(right, instruction).ok is True, instruction
    assert verdict(CODE.replace("def report(shelf):", "def report(shelf, verbose=True):"),
                   "add a parameter verbose with default False to report").ok is False
    used = right.replace("    return total_value(shelf.items, LIMIT)", "    return total_value(shelf.items, LIMIT) if verbose else 0")
    assert verdict(used, "add a parameter verbose with default False to report").ok is False
    annotated = CODE.replace("def report(shelf):", "def report(shelf, verbose: int = False):")
    assert verdict(annotated, "add a parameter verbose with default False to report").ok is False


def test_a_parameter_asked_with_its_annotation_must_carry_that_annotation():
    typed = "add a parameter verbose: bool = False to the function report"
    right = CODE.replace("def report(shelf):", "def report(shelf, verbose: bool = False):")
    assert verdict(right, typed).ok is True
    assert verdict(right.replace("verbose: bool = False", "verbose : bool=False"), typed).ok is True
    untyped = verdict(CODE.replace("def report(shelf):", "def report(shelf, verbose=False):"), typed)
    assert untyped.ok is False and "asks for `verbose: bool`" in untyped.reason
    assert verdict(right.replace(": bool", ": int"), typed).ok is False
    assert verdict(right.replace("= False", "= True"), typed).ok is False


# -- f-strings -------------------------------------------------------------------------------
def test_percent_formatting_to_fstrings_must_render_the_same():
    right = CODE.replace('"report: %s items, %.2f value" % (shelf.count(), shelf.value())',
                         'f"report: {shelf.count()} items, {shelf.value():.2f} value"')
    for instruction in ("convert the %-formatting to f-strings", "Use f-strings instead of % formatting.",
                        "replace the old-style % string formatting with f-strings", "switch % formatting to f-strings"):
        assert verdict(right, instruction).ok is True, instruction
    lost_precision = right.replace(":.2f}", "}")
    result = verdict(lost_precision, "switch % formatting to f-strings")
    assert result.ok is False and "does not render as" in result.reason
    swapped = right.replace("{shelf.count()} items, {shelf.value():.2f}", "{shelf.value():.2f} items, {shelf.count()}")
    assert verdict(swapped, "switch % formatting to f-strings").ok is False
    assert verdict(CODE, "switch % formatting to f-strings").ok is False
    shown = right.replace("{shelf.count()}", "{shelf.count()=}")
    assert verdict(shown, "switch % formatting to f-strings").ok is False


# -- type hints ------------------------------------------------------------------------------
def test_type_hints_only_annotations_and_never_a_guess_about_the_types():
    right = CODE.replace("def report(shelf):", "def report(shelf: Shelf) -> float:")
    result = verdict(right, "add type hints to report")
    assert result.ok is None and "whether the types are right is not checked" in result.reason
    half = verdict(CODE.replace("def report(shelf):", "def report(shelf: Shelf):"), "add type hints to report")
    assert half.ok is False and "the return of `report`" in half.reason
    nonsense = verdict(CODE.replace("def report(shelf):", "def report(shelf: shelf) -> float:"), "add type hints to report")
    assert nonsense.ok is False and "a parameter of `report`, not a type" in nonsense.reason
    other = verdict(right.replace("def value(self):", "def value(self) -> float:"), "add type hints to report")
    assert other.ok is False and "does not ask for" in other.reason
    assert verdict(CODE, "add type hints to report").ok is False


# -- snippet merges --------------------------------------------------------------------------
def test_snippet_merge_lines_in_order_markers_gone_rest_kept():
    update = '''# ... existing code ...
def report(shelf, verbose=False):
    print("report: %s items, %.2f value" % (shelf.count(), shelf.value()))
# ... existing code ...
'''
    right = CODE.replace("def report(shelf):", "def report(shelf, verbose=False):")
    assert verdict(right, "", update=update).ok is True
    assert verdict(CODE, "", update=update).ok is False
    pasted_beside = CODE.replace("def report(shelf):\n", "def report(shelf, verbose=False):\n    print(\"report: %s items, %.2f value\" % (shelf.count(), shelf.value()))\ndef report(shelf):\n")
    # Which lines the snippet replaces is not where its first line says: not passed, said why.
    beside = verdict(pasted_beside, "", update=update)
    assert beside.ok is None and "which lines of the file they replace" in beside.reason
    with_marker = right.replace("LIMIT = 10\n", "# ... existing code ...\n")
    assert verdict(with_marker, "", update=update).ok is False
    elsewhere = right.replace("LIMIT = 10", "LIMIT = 11")
    assert verdict(elsewhere, "", update=update).ok is False


# -- what is not checked ---------------------------------------------------------------------
def test_a_free_form_answer_that_uses_a_name_nothing_defines_fails():
    misspelt = CODE.replace("return total_value(shelf.items, LIMIT)", "return total_value(shelf.itms, LIMT)")
    result = verdict(misspelt, "make report shorter")
    assert result.ok is False and "`LIMT` (in `report`)" in result.reason and "itms" not in result.reason
    # names the answer binds itself, builtins, globals a function declares, attributes: fine
    helper = CODE.replace("def report(shelf):", "def _limit():\n    global CAP\n    CAP = 3\n    return max(CAP, 1)\n\n\ndef report(shelf):")
    assert verdict(helper.replace("LIMIT)", "_limit()) + CAP"), "make report shorter").ok is None
    # what the file itself left undefined is not the answer's doing; a star import cannot be read
    assert verdict(misspelt, "make it faster", code=misspelt).ok is None
    starred = "from os.path import *\n" + CODE
    assert verdict("from os.path import *\n" + misspelt, "make it faster", code=starred).ok is None


def test_instructions_it_does_not_understand_and_other_languages_are_unchecked():
    assert verdict(CODE, "make it faster").ok is None
    assert verdict(CODE, "rename a to b and c to d").ok is None
    js = check_edit("app.js", "let a = 1;\n", "let a = 1;\n", "rename a to b")
    assert js.ok is None and ".js" in js.reason


def test_every_held_out_target_passes_and_every_unchanged_answer_to_a_real_edit_fails():
    """The shipped evaluation sets (80 chunks, 64 whole files, 442 regions): the exact answer
    passes — checked and right, not merely unchecked; only a complete set of type hints is left
    unchecked, as whether the types are right cannot be told — and answering the file unchanged
    where something had to change fails."""
    root = Path(__file__).resolve().parent.parent / "hsedit" / "train" / "finetune"
    names = ("heldout.jsonl", "heldout_files.jsonl", "heldout_regions.jsonl")
    rows = [json.loads(line) for name in names for line in open(root / name)]
    assert len(rows) == 144 + 442
    unchecked = broken = 0
    for row in rows:
        path = row["path"] if row["path"].endswith(".py") else row["path"] + ".py"
        whole = row.get("scope") == "file"
        right = check_edit(path, row["before"], row["after"], row["instruction"], row.get("update"), whole_file=whole)
        # Unchecked only where the check says what cannot be told from the file (a renamed keyword
        # argument that may or may not be the variable, whether a type is right).
        unsure = right.ok is None and (row["kind"] == "add_type_hints" or "cannot be told" in right.reason)
        # A deletion generated before deletions of functions still read were left out (f-string
        # fields hid the uses) is a broken file, and fails as one.
        still_read = row["kind"] == "delete_function" and (undefined_globals(row["after"]) or {}).keys() - (undefined_globals(row["before"]) or {}).keys()
        broken += bool(still_read)
        assert right.ok is True or unsure or (still_read and right.ok is False), (row["kind"], row["instruction"], right.reason)
        unchecked += right.ok is None and row["kind"] != "add_type_hints"
        if row["before"] != row["after"]:
            unchanged = check_edit(path, row["before"], row["before"], row["instruction"], row.get("update"), whole_file=whole)
            assert unchanged.ok is False, (row["kind"], row["instruction"], unchanged.reason)
    assert unchecked <= len(rows) // 50  # a check that only ever said "unchecked" would pass nothing here
    assert broken <= 1


def test_deleting_a_function_still_called_fails_and_says_where():
    # `total_value` is called by `Shelf.value` and `report`: gone, both are NameErrors waiting
    start, end = CODE.index("def total_value"), CODE.index("class Shelf")
    result = verdict(CODE[:start] + CODE[end:], "delete the function total_value")
    assert result.ok is False and "`total_value` (in `report`)" in result.reason
    # a region's names are defined elsewhere in its file: not judged there, only once spliced
    region = "def report(shelf):\n    return total_value(shelf.items, LIMIT)\n"
    other = region.replace("LIMIT", "CAP")
    assert check_edit("a.py", region, other, "make it faster", whole_file=False).ok is None
    assert check_edit("a.py", region, other, "make it faster").ok is False
