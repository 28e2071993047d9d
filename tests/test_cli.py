"""`hsedit apply` through typer's CliRunner; the engine behind it is the real one."""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hsedit.cli import app

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RENAME = "rename the function total_value to inventory_value"
BROKEN = '''SCALE = 2


def area(width, height):
    return width * height * SCALE


def perimeter(width, height:
    return 2 * (width + height)
'''

runner = CliRunner()


def run(*args):
    return runner.invoke(app, ["apply", *map(str, args)])


@pytest.fixture
def heldout(tmp_path, monkeypatch):
    """A held-out rename the shipped model performs exactly: (path, instruction, expected text)."""
    from hsedit.train.finetune.dataset import HELDOUT, load

    (example,) = [
        e for e in load(HELDOUT)
        if e.kind == "rename_function" and e.path == "compressed_tensors/distributed/utils.py"
    ]
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    target = tmp_path / example.path
    target.parent.mkdir(parents=True)
    target.write_text(example.before)
    return example.path, example.instruction, example.after


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(EXAMPLES / "inventory.py", tmp_path / "inventory.py")
    subprocess.run(["git", "init", "-q"], check=True)
    return tmp_path


# -- refusals before any model runs ---------------------------------------------------------
def test_help_names_the_config_tables():
    """Typer reads help as rich markup, where `[tool.hsedit]` is a tag that vanishes unescaped."""
    apply_help = runner.invoke(app, ["apply", "--help"], env={"COLUMNS": "400"}).output
    assert "[tool.hsedit] drafter" in apply_help and "[tool.hsedit] max_deletion" in apply_help
    assert "[tool.hsedit.instructions]" in runner.invoke(app, ["hook", "--help"], env={"COLUMNS": "400"}).output


def test_missing_file(workdir):
    result = run("nope.py", RENAME)
    assert result.exit_code == 3 and "no such file: nope.py" in result.output


def test_directory(workdir):
    result = run(workdir, RENAME)
    assert result.exit_code == 3 and "directory" in result.output


def test_binary_file(workdir):
    (workdir / "blob.py").write_bytes(b"\x00\x01\x02")
    result = run("blob.py", RENAME)
    assert result.exit_code == 3 and "binary" in result.output


def test_non_utf8_file(workdir):
    (workdir / "latin.py").write_bytes("s = 'caf\xe9'\n".encode("latin-1"))
    result = run("latin.py", RENAME)
    assert result.exit_code == 3 and "UTF-8" in result.output


def test_empty_instruction(workdir):
    result = run("inventory.py", "   ")
    assert result.exit_code == 2 and "instruction is empty" in result.output


def test_unknown_drafter_and_force_without_write(workdir):
    assert run("inventory.py", RENAME, "--drafter", "magic").exit_code == 2
    assert run("inventory.py", RENAME, "--force").exit_code == 2


def test_missing_model(workdir):
    result = run("inventory.py", RENAME, "--model", "missing.gguf")
    assert result.exit_code == 7 and "model file not found" in result.output


def test_errors_are_one_line(workdir):
    result = run("nope.py", RENAME)
    assert result.output.count("\n") == 1


# -- with the real engine ------------------------------------------------------------------
@pytest.mark.engine
def test_diff_applies_with_git_and_leaves_the_file(heldout):
    path, instruction, expected = heldout
    before = Path(path).read_text()
    result = run(path, instruction)
    assert result.exit_code == 0, result.output
    diff = result.stdout  # stats and notes go to stderr
    assert diff.startswith(f"--- a/{path}\n+++ b/{path}\n")
    assert Path(path).read_text() == before
    Path("change.diff").write_text(diff)
    subprocess.run(["git", "apply", "change.diff"], check=True)
    assert Path(path).read_text() == expected


@pytest.mark.engine
def test_json_carries_text_diff_and_stats(heldout):
    path, instruction, expected = heldout
    result = run(path, instruction, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    stats = report["stats"]
    assert report["path"] == path and report["new_text"] == expected and report["changed"]
    assert report["validation"] == {"language": "python", "ok": True, "message": ""}
    assert report["check"]["kind"] == "rename" and report["check"]["ok"] is True, report["check"]
    for key in ("accepted_prediction_tokens", "rejected_prediction_tokens", "tokens_per_step",
                "tokens_per_second", "engine_steps", "time_to_first_token_s", "speedup_estimate"):
        assert key in stats
    assert stats["accepted_prediction_tokens"] > 0
    # The default hybrid drafter: accepted tokens add up over its two drafters; a rename is
    # mostly copied, and every step's kept chain and price are in the step log.
    assert sum(d["accepted"] for d in stats["drafters"].values()) == stats["accepted_prediction_tokens"]
    assert stats["drafters"]["copy"]["accepted"] > 0 and stats["chains_kept"]["copy"] > 0
    assert len(stats["step_log"]) == stats["engine_steps"]
    assert all(price is not None for _, _, _, price in stats["step_log"][1:])
    # --no-spec is the same text, with no drafts at all.
    plain = json.loads(run(path, instruction, "--json", "--no-spec").stdout)
    assert plain["new_text"] == report["new_text"]
    assert plain["stats"]["accepted_prediction_tokens"] == 0 and plain["stats"]["drafters"] == {}


@pytest.mark.engine
def test_write_replaces_the_file_with_the_new_text(heldout):
    path, instruction, expected = heldout
    result = run(path, instruction, "--write", "--diff", "out.diff")
    assert result.exit_code == 0, result.output
    assert Path(path).read_text() == expected
    assert Path("out.diff").read_text().startswith(f"--- a/{path}")


@pytest.mark.engine
def test_output_that_does_not_parse_is_not_written(workdir):
    (workdir / "broken.py").write_text(BROKEN)
    # An edit away from the broken signature: the model copies it as it is (a rename of that very
    # function may come back repaired). The deletion limit off: this is about the parse check.
    result = run("broken.py", "set SCALE to 3", "--write", "--max-deletion", "1")
    assert result.exit_code == 6, result.output
    assert "does not parse" in result.stderr and "--force" in result.stderr
    assert result.stdout.startswith("--- a/broken.py")  # the diff is still shown
    assert (workdir / "broken.py").read_text() == BROKEN
    forced = run("broken.py", "set SCALE to 3", "--write", "--force")
    assert forced.exit_code == 0
    assert (workdir / "broken.py").read_text() != BROKEN


@pytest.mark.engine
def test_truncated_output(workdir):
    before = (workdir / "inventory.py").read_text()
    result = run("inventory.py", RENAME, "--max-tokens", "5", "--write")
    assert result.exit_code == 5 and "cut off at 5 tokens" in result.output
    assert (workdir / "inventory.py").read_text() == before


@pytest.mark.engine
def test_file_too_long_for_the_context(workdir):
    """A whole file past the context is refused with `--scope file` (exit 4, nothing run); by
    regions only a single statement too large for the context is, named by its lines."""
    lines = "".join(f"value_{i} = {i} * {i}\n" for i in range(3000))
    (workdir / "huge.py").write_text(lines)
    whole = run("huge.py", "set value_7 to 8", "--scope", "file")
    assert whole.exit_code == 4, whole.output
    assert "huge.py is too long for the model's context" in whole.output and "8192" in whole.output
    table = "TABLE = [\n" + "".join(f"    ({i}, {i} * {i}),\n" for i in range(3000)) + "]\n"
    (workdir / "table.py").write_text("import math\n\n" + table)
    one = run("table.py", "set TABLE to []", "--write")
    assert one.exit_code == 4, one.output
    assert "table.py lines 3-3004 are too long for the model's context" in one.output, one.output
    assert (workdir / "table.py").read_text() == "import math\n\n" + table


@pytest.mark.engine
def test_ctrl_c_mid_stream_leaves_the_file(heldout, tmp_path):
    """Interrupted while the answer streams: exit 130, the file as it was, no temporary left.
    Made certain rather than timed: stderr is a terminal (so the live view streams), the edit is
    frozen (SIGSTOP) as soon as the view shows a step, the interrupt is queued, and only then is
    it let go, so it lands mid-stream however fast the machine."""
    import os
    import pty
    import select

    path, instruction, _ = heldout
    before = Path(path).read_text()
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "hsedit.cli", "apply", path, instruction, "--write", "--no-spec"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=terminal, text=True,
        # As a terminal's user runs it: a suite started in the background by a shell inherits
        # SIGINT ignored, and so would the edit (then it finishes and writes, exit 0).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(terminal)
    shown = b""
    deadline = time.monotonic() + 600
    while b"model-drafted" not in shown:  # the live view's legend: drawn with the first step
        assert time.monotonic() < deadline and process.poll() is None, shown.decode(errors="replace")[-2000:]
        if select.select([controller], [], [], 1.0)[0]:
            shown += os.read(controller, 65536)
    process.send_signal(signal.SIGSTOP)
    while select.select([controller], [], [], 0.5)[0]:  # what it wrote before it stopped
        shown += os.read(controller, 65536)
    assert b"wrote" not in shown and process.poll() is None  # frozen mid-stream, nothing written
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGCONT)
    # Read the terminal to its close, as a terminal is read: a process still writing to it must
    # never block on a full buffer while the test waits for it.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not select.select([controller], [], [], 0.5)[0]:
            if process.poll() is not None:
                break
            continue
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        shown += chunk
    process.communicate(timeout=60)
    os.close(controller)
    assert process.returncode == 130, shown.decode(errors="replace")[-2000:]
    assert b"interrupted" in shown
    assert Path(path).read_text() == before
    assert sorted(p.name for p in Path(path).parent.iterdir()) == ["utils.py"]


@pytest.mark.engine
def test_default_model_performs_a_held_out_rename_exactly(heldout):
    path, instruction, expected = heldout
    result = run(path, instruction, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["new_text"] == expected


@pytest.mark.engine
def test_default_model_performs_a_held_out_whole_file_rename_exactly(tmp_path, monkeypatch):
    """A whole held-out file (66 lines, a project the model never trained on), renamed through
    `hsedit apply` with the default drafter: the text the model was trained to write."""
    from hsedit.train.finetune.dataset import HELDOUT_FILES, load

    (example,) = [e for e in load(HELDOUT_FILES) if e.path == "fastapi_cloud_cli/commands/whoami.py"]
    assert example.kind == "rename_class" and len(example.before.splitlines()) > 50
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "whoami.py"
    target.write_text(example.before)
    result = run("whoami.py", example.instruction, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["new_text"] == example.after


COLORS = "".join(f'{name} = "{name.lower()}"\n' for name in (
    "BLACK", "RED", "GREEN", "YELLOW", "BLUE", "MAGENTA", "CYAN", "WHITE", "RESET",
    "BRIGHT_BLACK", "BRIGHT_RED", "BRIGHT_GREEN", "BRIGHT_YELLOW", "BRIGHT_BLUE", "BRIGHT_MAGENTA", "BRIGHT_CYAN",
)) + "\n\ndef style(text, fg=BRIGHT_BLACK):\n    return f\"{fg}:{text}\"\n"


@pytest.mark.engine
def test_a_wrong_answer_is_never_success(workdir):
    """A constants file like typer's colors.py, where the model once renamed the wrong constant and
    exited 0. Whatever the model answers now, exit 0 and a write only for the right rename; any
    other answer is exit 11 with the diff shown and the file as it was."""
    (workdir / "colors.py").write_text(COLORS)
    instruction = "rename BRIGHT_BLACK to BRIGHT_GREY"
    right = COLORS.replace("BRIGHT_BLACK", "BRIGHT_GREY")
    report = run("colors.py", instruction, "--json")
    answer = json.loads(report.stdout)
    exact = answer["new_text"] == right
    assert answer["check"]["ok"] is exact, answer["check"]
    assert report.exit_code == (0 if exact else 11), report.output
    written = run("colors.py", instruction, "--write")
    assert written.exit_code == report.exit_code, written.output
    assert (workdir / "colors.py").read_text() == (right if exact else COLORS)
    if not exact:
        assert "the answer does not do what was asked" in written.stderr and "--force" in written.stderr
        assert written.stdout.startswith("--- a/colors.py")  # the diff is still shown
