"""The write guard's rules, and the one resolver of settings from flags, environment and [tool.hsedit]."""

import pytest

from hsedit.config import ProjectConfig, find_pyproject, load_config
from hsedit.edit.guard import asks_for_deletion, check_answer, lazy_marker_lines
from hsedit.errors import UsageError

FILE = "".join(f"x{i} = {i}\n" for i in range(20))


def test_empty_answer_is_refused_whatever_the_instruction():
    assert not check_answer(FILE, "", "rename x1 to y1").ok
    assert not check_answer(FILE, "\n\n", "delete everything").ok
    assert check_answer("", "", "add nothing").ok  # an empty file may stay empty


def test_deletion_limit_is_a_share_of_the_files_lines():
    ten_fewer = "".join(FILE.splitlines(keepends=True)[:10])
    eleven_fewer = "".join(FILE.splitlines(keepends=True)[:9])
    assert check_answer(FILE, ten_fewer, "rename x1 to y1").ok  # exactly half: allowed
    verdict = check_answer(FILE, eleven_fewer, "rename x1 to y1")
    assert not verdict.ok and "11 of 20 lines shorter (55%)" in verdict.reason
    assert check_answer(FILE, eleven_fewer, "rename x1 to y1", max_deletion=0.6).ok
    assert check_answer(FILE, eleven_fewer, "remove the last eleven assignments").ok


@pytest.mark.parametrize("instruction", ["delete the helper", "Remove unused imports", "drop the debug prints",
                                         "get rid of dead code", "strip comments"])
def test_instructions_that_ask_for_deletion(instruction):
    assert asks_for_deletion(instruction)


@pytest.mark.parametrize("instruction", ["rename x to y", "add type hints", "set LIMIT to 3", "removal"])
def test_instructions_that_do_not(instruction):
    assert not asks_for_deletion(instruction)


@pytest.mark.parametrize("marker", [
    "    # ... existing code ...",
    "# ... rest of the file unchanged",
    "    // ... existing methods ...",
    "# rest of the code remains the same",
    "    # ...",
    "/* ... */",
    "# (code remains unchanged)",
])
def test_lazy_markers_are_found(marker):
    assert lazy_marker_lines(FILE, FILE + marker + "\n") == [marker]
    assert not check_answer(FILE, FILE + marker + "\n", "add a line").ok


@pytest.mark.parametrize("line", [
    "    # keep the rest of the list sorted",  # a real comment that mentions "rest of"
    "    x = ...",  # Ellipsis is Python code
    "    ...",
    "# unchanged since 2019",
])
def test_ordinary_lines_are_not_markers(line):
    assert lazy_marker_lines(FILE, FILE + line + "\n") == []


def test_a_marker_the_original_already_had_is_not_the_models():
    original = FILE + "# ... existing code ...\n"
    assert check_answer(original, original.replace("x1 = 1", "y1 = 1"), "rename x1 to y1").ok


def test_settings_resolve_flag_then_environment_then_file_then_default(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.hsedit]\ndrafter = "ngram"\nmax_deletion = 0.25\n')
    config = load_config(find_pyproject(tmp_path / "sub"))
    monkeypatch.delenv("HSEDIT_DRAFTER", raising=False)
    assert config.drafter_or_default(None) == "copy"  # "ngram", the copy drafter's old name, still reads
    assert config.drafter_or_default("dspark") == "dspark"
    monkeypatch.setenv("HSEDIT_DRAFTER", "none")
    assert config.drafter_or_default(None) == "none"
    assert config.max_deletion_or_default(None) == 0.25
    assert ProjectConfig().max_deletion_or_default(None) == 0.5
    monkeypatch.setenv("HSEDIT_DRAFTER", "hybird")
    with pytest.raises(UsageError, match="HSEDIT_DRAFTER: unknown drafter 'hybird'"):
        config.drafter_or_default(None)


def test_no_pyproject_means_defaults(tmp_path):
    assert load_config(None) == ProjectConfig()
    assert load_config(tmp_path / "pyproject.toml") == ProjectConfig()


def test_compiling_behind_the_warm_engine_is_on_unless_switched_off(tmp_path, monkeypatch):
    monkeypatch.delenv("HSEDIT_COMPILE_BEHIND", raising=False)
    assert ProjectConfig().compile_behind_or_default(None) is True
    (tmp_path / "pyproject.toml").write_text("[tool.hsedit]\ncompile_behind = false\n")
    config = load_config(tmp_path / "pyproject.toml")
    assert config.compile_behind_or_default(None) is False
    monkeypatch.setenv("HSEDIT_COMPILE_BEHIND", "1")  # the environment over the file
    assert config.compile_behind_or_default(None) is True
    monkeypatch.setenv("HSEDIT_COMPILE_BEHIND", "maybe")
    with pytest.raises(UsageError, match="HSEDIT_COMPILE_BEHIND takes 1 or 0"):
        config.compile_behind_or_default(None)
    (tmp_path / "pyproject.toml").write_text('[tool.hsedit]\ncompile_behind = "no"\n')
    with pytest.raises(UsageError, match="compile_behind must be true or false"):
        load_config(tmp_path / "pyproject.toml")
