"""The engine-free half of an edit: prompt, extraction, validation, diff, files."""

import os
import stat
import subprocess

import pytest

from hsedit.edit.diff import summarize, unified_diff
from hsedit.edit.extract import extract_file
from hsedit.edit.files import atomic_write, read_source
from hsedit.edit.prompt import ApplyPrompt, completion_for, language_for, load_template
from hsedit.edit.validate import validate
from hsedit.errors import InputFileError

CODE = "def f(x):\n    return x + 1\n"


# -- prompt --------------------------------------------------------------------------------
def test_prompt_holds_the_file_instruction_and_an_open_fence():
    prompt = ApplyPrompt.build("pkg/mod.py", CODE, "  rename f to g ")
    system, user = prompt.messages
    assert system["role"] == "system" and user["role"] == "user"
    assert "```python\n" + CODE + "```" in user["content"]
    assert user["content"].endswith("Instruction: rename f to g")
    assert prompt.response_prefix == "```python\n"
    assert completion_for("x = 1") == "x = 1\n```"
    assert language_for("a/b.RS") == "rust" and language_for("notes") == ""
    assert set(load_template("apply")) == {"system", "user", "user_update", "response_prefix"}


def test_merge_prompt_carries_the_update_snippet():
    prompt = ApplyPrompt.build("m.py", CODE, update="# ... existing code ...\n    return x + 2\n")
    assert "```python\n# ... existing code ...\n    return x + 2\n```" in prompt.messages[1]["content"]
    assert "Instruction" not in prompt.messages[1]["content"]


# -- extraction ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "answer",
    [
        CODE + "```",
        CODE + "```\n\nI renamed the function for you.",
        "```python\n" + CODE + "```\nDone.",  # the model opened a second fence
        "\n```py\n" + CODE + "```",
    ],
)
def test_extracts_the_file_from_fences_and_prose(answer):
    extracted = extract_file(answer, CODE)
    assert extracted.text == CODE and extracted.closed


def test_unclosed_answer_is_kept_and_flagged():
    extracted = extract_file("def f(x):\n    return", CODE)
    assert extracted.text == "def f(x):\n    return\n" and not extracted.closed


def test_final_newline_follows_the_original():
    assert extract_file("x = 1\n```", "x = 0").text == "x = 1"
    assert extract_file("x = 1```", "x = 0\n").text == "x = 1```\n"


# -- validation ----------------------------------------------------------------------------
def test_python_is_parsed_other_files_are_not_checked():
    assert validate("a.py", CODE, CODE).ok
    broken = validate("a.py", "def f(x:\n    return x\n", CODE)
    assert not broken.ok and broken.checked and "line" in broken.message
    other = validate("notes.txt", "anything (", "anything")
    assert other.ok and not other.checked


def test_an_unclosed_bracket_is_reported_at_its_line():
    clean = validate("a.py", "x = 1\n", "x = 0\n")
    assert clean.ok and clean.checked and clean.message == ""
    broken = validate("a.py", "x = 1\ny = (2,\n", "x = 0\n")
    assert not broken.ok and broken.checked and broken.language == "python"
    assert broken.message == "syntax error at line 2, column 1"  # where the unclosed statement starts


# tree-sitter parses both of these; Python refuses to import either.
MISINDENTED = {
    "def f(items):\n    a = 1\n    b = 2\n        return a\n": "indentation error at line 4: unexpected indent",
    "def f(items):\n        a = 1\n    b = 2\n": "indentation error at line 3: unindent does not match any outer indentation level",
}


def test_a_misindented_python_file_does_not_validate():
    original = "def f(items):\n    a = 1\n    b = 2\n    return a\n"
    for text, message in MISINDENTED.items():
        result = validate("a.py", text, original)
        assert not result.ok and result.message == message


def test_what_parses_but_python_refuses_to_import_does_not_validate():
    original = "def f(month, year):\n    def g():\n        return month\n    return g\n"
    duplicate = validate("a.py", original.replace("f(month, year)", "f(year, year)"), original)
    assert not duplicate.ok and duplicate.message == "syntax error at line 1: duplicate argument 'year' in function definition"
    unbound = validate("a.py", original.replace("        return month", "        nonlocal day\n        return month"), original)
    assert not unbound.ok and "no binding for nonlocal 'day'" in unbound.message


def test_syntax_this_python_cannot_read_is_left_to_tree_sitter_where_the_original_has_it():
    # a file Python cannot parse to begin with (here: Python 2): its own parser has no say
    legacy = "def f(items):\n    print 'a'\n    return items\n"
    assert validate("a.py", legacy.replace("items", "values"), legacy).ok
    assert not validate("a.py", legacy.replace("items", "values"), "x = 1\n").ok


def test_an_invalid_escape_is_valid_python_whatever_the_warning_filters():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as under `python -W error`: Python warns on every parse of it
        assert validate("a.py", 'PATTERN = "\\d+"\n', 'PATTERN = "[0-9]+"\n').ok


# -- diff ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "old,new",
    [
        (CODE, CODE.replace("x + 1", "x + 2")),
        ("a\nb", "a\nc"),  # no final newline on either side
        ("a\nb\n", "a\nb"),  # final newline removed
        ("", "new file body\n"),
    ],
)
def test_diff_applies_with_git(tmp_path, old, new):
    target = tmp_path / "m.py"
    target.write_text(old)
    diff = unified_diff(old, new, "m.py")
    (tmp_path / "p.diff").write_text(diff)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", "p.diff"], cwd=tmp_path, check=True)
    assert target.read_text() == new


def test_no_change_no_diff_and_counts():
    assert unified_diff(CODE, CODE, "m.py") == ""
    summary = summarize(unified_diff("a\nb\n", "a\nc\nd\n", "m.py"))
    assert (summary.files, summary.added, summary.removed) == (1, 2, 1)


# -- files ---------------------------------------------------------------------------------
def test_read_refuses_what_is_not_editable_text(tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        read_source(tmp_path / "missing.py")
    with pytest.raises(InputFileError, match="directory"):
        read_source(tmp_path)
    (tmp_path / "bin.py").write_bytes(b"\x7fELF\x00\x01")
    with pytest.raises(InputFileError, match="binary"):
        read_source(tmp_path / "bin.py")
    (tmp_path / "latin.py").write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    with pytest.raises(InputFileError, match="UTF-8"):
        read_source(tmp_path / "latin.py")


def test_crlf_files_keep_their_line_ends(tmp_path):
    path = tmp_path / "w.py"
    path.write_bytes(b"a = 1\r\nb = 2\r\n")
    source = read_source(path)
    assert source.text == "a = 1\nb = 2\n" and source.endings == ("\r\n", "\r\n")
    assert source.restore("a = 3\nb = 2\nc = 4\n") == "a = 3\r\nb = 2\r\nc = 4\r\n"
    assert source.original == "a = 1\r\nb = 2\r\n"


def test_mixed_line_ends_change_only_where_the_edit_did(tmp_path):
    lines = [f"v{i} = {i}" for i in range(25)]
    raw = "".join(line + ("\r\n" if i == 7 else "\n") for i, line in enumerate(lines))
    path = tmp_path / "m.py"
    path.write_bytes(raw.encode())
    source = read_source(path)
    edited = source.text.replace("v3 = 3", "v3 = 33").replace("v7 = 7", "v7 = 77")
    restored = source.restore(edited + "new = 1\n")
    assert restored == raw.replace("v3 = 3\n", "v3 = 33\n").replace("v7 = 7\r\n", "v7 = 77\r\n") + "new = 1\n"


def test_byte_order_mark_and_missing_final_newline_are_kept(tmp_path):
    path = tmp_path / "b.py"
    path.write_bytes(b"\xef\xbb\xbfx = 1\r\ny = 2")
    source = read_source(path)
    assert source.text == "x = 1\ny = 2" and source.bom
    assert source.restore("x = 1\ny = 3").encode() == b"\xef\xbb\xbfx = 1\r\ny = 3"
    assert source.restore("x = 1\ny = 3\nz = 4").encode() == b"\xef\xbb\xbfx = 1\r\ny = 3\r\nz = 4"


def test_atomic_write_replaces_and_keeps_the_mode(tmp_path):
    path = tmp_path / "run.py"
    path.write_text("old\n")
    os.chmod(path, 0o755)
    atomic_write(path, "new\n")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert os.listdir(tmp_path) == ["run.py"]


def test_atomic_write_failure_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "keep.py"
    path.write_text("old\n")

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, "new\n")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["keep.py"]
