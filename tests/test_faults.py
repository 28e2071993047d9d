"""The fault suite: every bad input or fault a write path can meet, and what hsedit does about it.

Read `FAULTS` as the table: the file(s) on disk, the instruction, the model's answer, the flags
→ the exit code, a piece of the one-line message, and the file's bytes afterwards (unchanged,
or exactly the intended new bytes). Those rows need no model to produce their condition: each
runs a fixed answer through the same path `hsedit apply` takes (`load_job` → `finish_edit` →
`settle`, whose error's exit code is what the CLI exits with). The rows that need the real
engine or a real process are functions below the table, and a few live beside the feature:

| fault                               | code | where                                                     |
| ----------------------------------- | ---- | --------------------------------------------------------- |
| over-long file                      | 4    | test_cli.py::test_file_too_long_for_the_context           |
| Ctrl-C while the answer streams     | 130  | test_cli.py::test_ctrl_c_mid_stream_leaves_the_file       |
| answer that does not parse (model)  | 6    | test_cli.py::test_output_that_does_not_parse_is_not_written |
| truncated answer (model)            | 5    | test_cli.py::test_truncated_output                        |
| kill -9 of a batch, then resume     | 0    | test_kill_9_of_a_batch_then_resume (here)                 |
| answer that fails the instruction check (model) | 11 | test_cli.py::test_a_wrong_answer_is_never_success |
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hsedit.apply import EditJob, finish_edit, load_job, settle
from hsedit.batch import FAILED, OK, BatchTask, ResultsJournal, finish_task, load_batch
from hsedit.cli import app
from hsedit.edit.diff import summarize
from hsedit.edit.files import read_source
from hsedit.engine.engine import Generation, GenerationRequest
from hsedit.engine.stats import RequestStats
from hsedit.errors import HseditError

UNCHANGED = object()  # the file's bytes must be exactly as before

SCRIPT = "".join(f"def step_{i}(value):\n    return value + {i}\n\n\n" for i in range(22)) + "print(step_0(1))\n"
assert SCRIPT.count("\n") == 89  # the reported case: a real 89-line script
RENAMED = SCRIPT.replace("step_0", "first_step")
CODE = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
LAZY = "def area(w, h):\n    return w * h * 1\n\n\n# ... existing code ...\n"
MIXED = "".join(f"v{i} = {i}" + ("\r\n" if i == 7 else "\n") for i in range(25))


@dataclass
class Fault:
    name: str
    files: dict[str, bytes | str]  # written first; a str value starting with "->" makes a symlink
    path: str
    instruction: str
    answer: str | None = None  # the new file as the model wrote it (LF); None: never reached
    finish: str = "stop"  # "length": cut off at max_tokens
    write: bool = True
    force: bool = False
    during: Callable[[Path], None] | None = None  # what happens to the files while the edit runs
    code: int = 0
    message: str = ""
    after: dict[str, object] = field(default_factory=dict)  # path -> UNCHANGED or exact bytes


def _append_line(root: Path) -> None:
    with open(root / "t.py", "a") as handle:
        handle.write("USER_LINE = 1\n")


def _replace_file(root: Path) -> None:
    """An editor's save: the same bytes in a new file renamed over the old one."""
    (root / "saved.tmp").write_text(CODE)
    os.replace(root / "saved.tmp", root / "t.py")


FAULTS = [
    Fault("missing file", {}, "nope.py", "rename x", code=3, message="no such file: "),
    Fault("directory", {"d/a.py": "x = 1\n"}, "d", "rename x", code=3, message="is a directory"),
    Fault("binary file", {"b.py": b"\x7fELF\x00\x01"}, "b.py", "rename x", code=3, message="binary file",
          after={"b.py": UNCHANGED}),
    Fault("not UTF-8", {"l.py": "s = 'caf\xe9'\n".encode("latin-1")}, "l.py", "rename s", code=3,
          message="not UTF-8", after={"l.py": UNCHANGED}),
    Fault("broken symlink", {"link.py": "->gone.py"}, "link.py", "rename x", code=3, message="broken symlink"),
    Fault("empty instruction", {"t.py": CODE}, "t.py", "  ", code=2, message="instruction is empty",
          after={"t.py": UNCHANGED}),
    Fault("read-only file", {"t.py": CODE}, "t.py", "rename area to size", code=3, message="read-only",
          after={"t.py": UNCHANGED}),
    Fault("empty answer (the 89-line script)", {"s.py": SCRIPT}, "s.py", "rename step_0 to first_step", "",
          code=8, message="the answer is empty: it would delete all 89 lines", after={"s.py": UNCHANGED}),
    Fault("empty answer, no --write", {"s.py": SCRIPT}, "s.py", "rename step_0 to first_step", "", write=False,
          code=8, message="the answer is empty", after={"s.py": UNCHANGED}),
    Fault("empty answer, --force", {"s.py": SCRIPT}, "s.py", "rename step_0 to first_step", "", force=True,
          after={"s.py": b"\n"}),
    Fault("mass deletion", {"s.py": SCRIPT}, "s.py", "rename step_0 to first_step", SCRIPT[:300],
          code=8, message="lines shorter", after={"s.py": UNCHANGED}),
    Fault("deletion that was asked for", {"s.py": SCRIPT}, "s.py", "delete every function but step_0",
          SCRIPT[:40], after={"s.py": SCRIPT[:40].encode()}),
    Fault("lazy placeholder", {"t.py": CODE}, "t.py", "multiply the area by 1", LAZY,
          code=8, message="placeholder instead of code ('# ... existing code ...')", after={"t.py": UNCHANGED}),
    Fault("truncated answer", {"t.py": CODE}, "t.py", "rename area to size", CODE[:30], finish="length",
          code=5, message="cut off at 100 tokens", after={"t.py": UNCHANGED}),
    # A rename's answer cannot grow past its room: cut off there, it ran away; free form may need more.
    Fault("runaway answer", {"t.py": CODE}, "t.py", "rename area to size", CODE * 3, finish="length",
          code=5, message="a right answer to this instruction is shorter, so it ran away", after={"t.py": UNCHANGED}),
    Fault("truncated free-form answer", {"t.py": CODE}, "t.py", "make the code clearer", CODE[:30], finish="length",
          code=5, message="raise --max-tokens", after={"t.py": UNCHANGED}),
    Fault("answer that does not parse", {"t.py": CODE}, "t.py", "rename area to size",
          CODE.replace("(w, h):", "(w, h:", 1), code=6, message="does not parse", after={"t.py": UNCHANGED}),
    Fault("answer that does not parse, --force", {"t.py": CODE}, "t.py", "rename area to size",
          CODE.replace("(w, h):", "(w, h:", 1), force=True, after={"t.py": CODE.replace("(w, h):", "(w, h:", 1).encode()}),
    Fault("file changed during the edit", {"t.py": CODE}, "t.py", "rename area to size",
          CODE.replace("area", "size"), during=_append_line, code=9, message="changed while the edit ran",
          after={"t.py": (CODE + "USER_LINE = 1\n").encode(), "t.py.hsedit-new": CODE.replace("area", "size").encode()}),
    Fault("file replaced during the edit", {"t.py": CODE}, "t.py", "rename area to size",
          CODE.replace("area", "size"), during=_replace_file, code=9, message="it was replaced by another file",
          after={"t.py": CODE.encode()}),
    Fault("symlink", {"real.py": CODE, "link.py": "->real.py"}, "link.py", "rename area to size",
          CODE.replace("area", "size"), after={"real.py": CODE.replace("area", "size").encode(), "link.py": "->real.py"}),
    Fault("CRLF file", {"c.py": CODE.replace("\n", "\r\n")}, "c.py", "rename area to size",
          CODE.replace("area", "size"), after={"c.py": CODE.replace("area", "size").replace("\n", "\r\n").encode()}),
    Fault("mixed line ends (one CRLF of 25)", {"m.py": MIXED}, "m.py", "set v3 to 33",
          MIXED.replace("\r\n", "\n").replace("v3 = 3\n", "v3 = 33\n"),
          after={"m.py": MIXED.replace("v3 = 3\n", "v3 = 33\n").encode()}),
    Fault("byte-order mark", {"bom.py": b"\xef\xbb\xbf" + CODE.encode()}, "bom.py", "rename area to size",
          CODE.replace("area", "size"), after={"bom.py": b"\xef\xbb\xbf" + CODE.replace("area", "size").encode()}),
    Fault("no final newline", {"n.py": CODE.rstrip("\n")}, "n.py", "rename area to size",
          CODE.replace("area", "size"), after={"n.py": CODE.replace("area", "size").rstrip("\n").encode()}),
    Fault("no change", {"t.py": CODE}, "t.py", "make it better", CODE, after={"t.py": UNCHANGED}),
    Fault("rename that misses a use", {"t.py": CODE + "print(area(2, 3))\n"}, "t.py", "rename area to size",
          (CODE + "print(area(2, 3))\n").replace("def area", "def size"), code=11,
          message="1 of 2 uses of `area` not renamed (line 7)", after={"t.py": UNCHANGED}),
    Fault("rename that misses a use, no --write", {"t.py": CODE + "print(area(2, 3))\n"}, "t.py", "rename area to size",
          (CODE + "print(area(2, 3))\n").replace("def area", "def size"), write=False, code=11,
          message="not renamed", after={"t.py": UNCHANGED}),
    Fault("rename answered with the file unchanged", {"t.py": CODE}, "t.py", "rename area to size", CODE, code=11,
          message="1 of 1 uses of `area` not renamed", after={"t.py": UNCHANGED}),
    Fault("constant set and something else changed", {"t.py": "LIMIT = 3\n" + CODE}, "t.py", "set LIMIT to 4",
          "LIMIT = 4\n" + CODE.replace("w * h", "w + h"), code=11, message="line 3 changes `*` to `+`",
          after={"t.py": UNCHANGED}),
    Fault("rename that misses a use, --force", {"t.py": CODE + "print(area(2, 3))\n"}, "t.py", "rename area to size",
          (CODE + "print(area(2, 3))\n").replace("def area", "def size"), force=True,
          after={"t.py": (CODE + "print(area(2, 3))\n").replace("def area", "def size").encode()}),
]


def _lay_out(root: Path, files: dict[str, bytes | str]) -> dict[str, bytes]:
    before = {}
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith("->"):
            path.symlink_to(content[2:])
            continue
        data = content if isinstance(content, bytes) else content.encode()
        path.write_bytes(data)
        before[name] = data
    return before


def run_fault(root: Path, fault: Fault) -> tuple[int, str]:
    """The apply path with a fixed answer: (exit code, message)."""
    if fault.name == "read-only file":
        os.chmod(root / fault.path, 0o444)
    try:
        job = load_job(root / fault.path, fault.instruction, write=fault.write)
        # vLLM leaves the stop string (newline + closing fence) out of the text; so does this.
        generation = Generation(text=fault.answer.removesuffix("\n"), stats=RequestStats(finish_reason=fault.finish))
        result = finish_edit(job, generation, GenerationRequest([], max_tokens=100))
        if fault.during:
            fault.during(root)
        settle(result, write=fault.write, force=fault.force)
    except HseditError as error:
        return error.exit_code, str(error)
    return 0, ""


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault(tmp_path, fault):
    before = _lay_out(tmp_path, fault.files)
    code, message = run_fault(tmp_path, fault)
    assert (code, "\n" in message) == (fault.code, False), message
    assert fault.message in message
    for name, expected in fault.after.items():
        path = tmp_path / name
        if isinstance(expected, str):  # a symlink that must still be one
            assert path.is_symlink() and os.readlink(path) == expected[2:]
        else:
            assert path.read_bytes() == (before[name] if expected is UNCHANGED else expected), name
    leftovers = [p.name for p in tmp_path.rglob("*") if "hsedit-tmp" in p.name]
    assert not leftovers


def test_ctrl_c_while_writing_leaves_the_file(tmp_path, monkeypatch):
    (tmp_path / "t.py").write_text(CODE)
    job = load_job(tmp_path / "t.py", "rename area to size", write=True)
    result = finish_edit(job, Generation(text=CODE.replace("area", "size")), GenerationRequest([], max_tokens=100))

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        settle(result, write=True)
    assert (tmp_path / "t.py").read_text() == CODE
    assert os.listdir(tmp_path) == ["t.py"]


def test_write_keeps_mode_bits(tmp_path):
    (tmp_path / "run.py").write_text(CODE)
    os.chmod(tmp_path / "run.py", 0o750)
    job = load_job(tmp_path / "run.py", "rename area to size", write=True)
    settle(finish_edit(job, Generation(text=CODE.replace("area", "size")), GenerationRequest([], max_tokens=100)), write=True)
    assert (tmp_path / "run.py").stat().st_mode & 0o7777 == 0o750


# -- batch ---------------------------------------------------------------------------------
def _task(root: Path, name: str, instruction: str) -> BatchTask:
    return BatchTask(f"key-{name}", root / name, name, instruction, None)


def _batch_finish(root, task, answer, journal, write=True):
    job = EditJob.for_source(read_source(task.path), task.display_path, task.instruction)
    generation = Generation(text=answer.removesuffix("\n"), stats=RequestStats(finish_reason="stop"))
    result = finish_edit(job, generation, GenerationRequest([], max_tokens=100), max_deletion=0.5)
    return finish_task(task, result, journal, write=write, force=False)


def test_batch_reports_a_destructive_answer_as_failed(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    journal = ResultsJournal(tmp_path / "r.jsonl")
    outcome = _batch_finish(tmp_path, _task(tmp_path, "s.py", "rename step_0 to first_step"), "", journal)
    assert (outcome.status, outcome.exit_code, outcome.written) == (FAILED, 8, False)
    assert "answer is empty" in outcome.error and summarize(outcome.diff).removed >= 88  # all but an empty line
    assert (tmp_path / "s.py").read_text() == SCRIPT


def test_batch_counts_a_failed_check_as_failed_and_unchanged_only_when_nothing_was_to_do(tmp_path):
    (tmp_path / "t.py").write_text(CODE)
    journal = ResultsJournal(tmp_path / "r.jsonl")
    wrong = _batch_finish(tmp_path, _task(tmp_path, "t.py", "rename area to size"), CODE, journal)
    assert (wrong.status, wrong.exit_code, wrong.written) == (FAILED, 11, False)
    assert "1 of 1 uses of `area` not renamed" in wrong.error and wrong.check["ok"] is False
    nothing = _batch_finish(tmp_path, _task(tmp_path, "t.py", "rename volume to size"), CODE, journal)
    assert nothing.status == "unchanged" and nothing.check["reason"].startswith("nothing to do")
    unchecked = _batch_finish(tmp_path, _task(tmp_path, "t.py", "make it better"), CODE, journal)
    assert unchecked.status == "unchanged" and unchecked.check["ok"] is None
    assert (tmp_path / "t.py").read_text() == CODE


def test_results_journal_never_glues_a_record_to_a_torn_line(tmp_path):
    journal = ResultsJournal(tmp_path / "r.jsonl")
    journal.append({"key": "a", "status": OK, "written": True})
    with open(journal.path, "a") as handle:  # kill -9 in the middle of a record
        handle.write('{"key": "b", "sta')
    journal.append({"key": "c", "status": OK, "written": True})
    assert set(journal.latest()) == {"a", "c"}
    assert journal.path.read_text().splitlines()[-1] == '{"key": "c", "status": "ok", "written": true}'


@pytest.mark.parametrize("crash_after", ["writing record", "rename"])
def test_an_interrupted_write_is_never_done_twice(tmp_path, crash_after):
    """A crash between the journal's "writing" record and the outcome: the rerun looks at the
    file. Renamed already: recorded as written, not run again. Not renamed: runs again."""
    (tmp_path / "t.py").write_text(CODE)
    task = _task(tmp_path, "t.py", "rename area to size")
    journal = ResultsJournal(tmp_path / "r.jsonl")
    new = CODE.replace("area", "size")
    import hashlib

    journal.append({"key": task.key, "path": "t.py", "status": "writing", "written": False, "diff": "d",
                    "after_sha256": hashlib.sha256(new.encode()).hexdigest()})
    if crash_after == "rename":
        (tmp_path / "t.py").write_text(new)
    pending = journal.pending([task], write=True)
    if crash_after == "rename":
        assert pending == [] and journal.latest()[task.key]["status"] == OK
        assert journal.latest()[task.key]["written"] is True
    else:
        assert pending == [task]


def test_unwritten_successes_run_again_when_the_rerun_writes(tmp_path):
    task = _task(tmp_path, "t.py", "x")
    journal = ResultsJournal(tmp_path / "r.jsonl")
    journal.append({"key": task.key, "status": OK, "written": False})
    assert journal.pending([task], write=False) == []
    assert journal.pending([task], write=True) == [task]


BAD_TASK_FILES = [
    ("not JSON", "{nope\n", "tasks.jsonl:1: not JSON"),
    ("not an object", "[1, 2]\n", "tasks.jsonl:1: expected a JSON object"),
    ("no instruction", '{"path": "a.py"}\n', 'tasks.jsonl:1: expected {"path", "instruction"}'),
    ("no tasks", "\n\n", "tasks.jsonl: no tasks"),
    ("two tasks on one file", '{"path": "a.py", "instruction": "x"}\n{"path": "./a.py", "instruction": "y"}\n',
     "already edited by line 1"),
]


@pytest.mark.parametrize("content,message", [c[1:] for c in BAD_TASK_FILES], ids=[c[0] for c in BAD_TASK_FILES])
def test_bad_task_files_are_one_line_and_exit_2(tmp_path, content, message):
    (tmp_path / "a.py").write_text(CODE)
    (tmp_path / "tasks.jsonl").write_text(content)
    with pytest.raises(HseditError) as caught:
        load_batch(tmp_path / "tasks.jsonl")
    assert caught.value.exit_code == 2 and message in str(caught.value)
    result = CliRunner().invoke(app, ["batch", str(tmp_path / "tasks.jsonl")])
    assert result.exit_code == 2 and message in result.output and result.output.count("\n") == 1
    assert (tmp_path / "a.py").read_text() == CODE


BAD_HOOK_CONFIGS = [
    ("unknown drafter", 'drafter = "hybird"', "unknown drafter 'hybird'"),
    ("unknown key", 'drafer = "hybrid"', "unknown key 'drafer'"),
    ("model of the wrong type", "model = 3", "model must be a model name or path"),
    ("max_deletion out of range", "max_deletion = 2", "max_deletion must be a number from 0 to 1"),
    ("empty instruction", '[tool.hsedit.instructions]\n"*.py" = ""', "needs a non-empty instruction"),
    ("instruction of the wrong type", '[tool.hsedit.instructions]\n"*.py" = 1', "needs a non-empty instruction"),
    ("not TOML", "= =", "not valid TOML"),
]


@pytest.mark.parametrize("body,message", [c[1:] for c in BAD_HOOK_CONFIGS], ids=[c[0] for c in BAD_HOOK_CONFIGS])
def test_hook_config_errors_are_one_line_and_exit_2(tmp_path, monkeypatch, body, message):
    instructions = "" if "instructions" in body else '\n[tool.hsedit.instructions]\n"*.py" = "rename x to y"\n'
    (tmp_path / "pyproject.toml").write_text("[tool.hsedit]\n" + body + "\n" + instructions)
    (tmp_path / "a.py").write_text(CODE)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["hook", "fix", "a.py"])
    assert result.exit_code == 2, result.output
    assert message in result.output and result.output.count("\n") == 1
    assert (tmp_path / "a.py").read_text() == CODE


# -- with the real engine, in a real process ------------------------------------------------
@pytest.mark.engine
def test_kill_9_of_a_batch_then_resume(tmp_path):
    """`hsedit batch --write` killed with SIGKILL once its first task is recorded; the rerun
    redoes only the unfinished tasks, and no file is written twice. The last task's file is a
    FIFO nobody writes to until the kill, so the batch cannot finish first, however fast the
    machine: the kill always lands mid-batch."""
    workers = ("alpha", "beta", "gamma", "delta")
    constants = {f"{w}.py": f'"""Settings of the {w} worker."""\n\nLIMIT = 8\nNAME = "{w}"\n' for w in workers}
    for name, text in constants.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "delta.py").unlink()
    os.mkfifo(tmp_path / "delta.py")  # reading it blocks: the batch waits there
    tasks = [{"path": name, "instruction": f"set LIMIT to {16 * (i + 1)}"} for i, name in enumerate(constants)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    results = tmp_path / "tasks.jsonl.results.jsonl"
    command = [sys.executable, "-m", "hsedit.cli", "batch", "tasks.jsonl", "--write", "--drafter", "copy", "--max-batch", "1"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        rows = [line for line in results.read_text().splitlines() if '"status": "ok"' in line] if results.exists() else []
        if rows:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the batch finished before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    (tmp_path / "delta.py").unlink()
    (tmp_path / "delta.py").write_text(constants["delta.py"])
    killed_rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip().endswith("}")]
    done_first = {row["key"] for row in killed_rows if row["status"] == OK}
    assert 1 <= len(done_first) < len(tasks)

    rerun = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip().endswith("}")]
    written = [row["key"] for row in rows if row["status"] == OK and row["written"]]
    assert sorted(written) == sorted(set(written)) and len(written) == len(tasks)  # each file once
    assert not done_first & {row["key"] for row in rows[len(killed_rows):]}  # finished ones not redone
    for i, (name, before) in enumerate(constants.items()):
        assert (tmp_path / name).read_text() == before.replace("LIMIT = 8", f"LIMIT = {16 * (i + 1)}")
