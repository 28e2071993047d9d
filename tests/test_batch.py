"""`hsedit batch` on the real engine: concurrency, isolation of failures, resumption, patch."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hsedit.cli import app
from tests.test_cli import BROKEN

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
runner = CliRunner()
UTILS = "compressed_tensors/distributed/utils.py"


@pytest.fixture
def project(tmp_path):
    from hsedit.train.finetune.dataset import HELDOUT, load

    # A held-out rename the shipped model performs exactly, and a constant change it gets right.
    (example,) = [
        e for e in load(HELDOUT) if e.kind == "rename_function" and e.path == "compressed_tensors/distributed/utils.py"
    ]
    (tmp_path / "compressed_tensors" / "distributed").mkdir(parents=True)
    (tmp_path / example.path).write_text(example.before)
    shutil.copy(EXAMPLES / "temperature.py", tmp_path / "temperature.py")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    tasks = [
        {"path": example.path, "instruction": example.instruction},
        {"path": "temperature.py", "instruction": "set FREEZING_F to 32.5"},
        {"path": "missing.py", "instruction": "rename x to y"},
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return tmp_path


def test_two_tasks_on_one_file_are_refused(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    line = json.dumps({"path": "a.py", "instruction": "set x to 2"})
    (tmp_path / "tasks.jsonl").write_text(line + "\n" + json.dumps({"path": "a.py", "instruction": "other"}) + "\n")
    result = runner.invoke(app, ["batch", str(tmp_path / "tasks.jsonl")])
    assert result.exit_code == 2 and "already edited by line 1" in result.output


@pytest.mark.engine
def test_batch_isolates_failures_resumes_and_writes_one_patch(project):
    originals = {name: (project / name).read_text() for name in (UTILS, "temperature.py")}
    args = ["batch", str(project / "tasks.jsonl"), "--patch", str(project / "all.diff"), "--max-batch", "4"]
    first = runner.invoke(app, args)
    assert first.exit_code == 1, first.output  # the missing file fails, alone
    rows = [json.loads(line) for line in (project / "tasks.jsonl.results.jsonl").read_text().splitlines()]
    by_path = {row["path"]: row for row in rows}
    assert by_path["missing.py"]["status"] == "failed" and by_path["missing.py"]["exit_code"] == 3
    succeeded = [row for row in rows if row["status"] == "ok"]
    assert {row["path"] for row in succeeded} == {UTILS, "temperature.py"}
    patch = (project / "all.diff").read_text()
    assert all(row["diff"] in patch for row in succeeded)
    subprocess.run(["git", "apply", "--check", "all.diff"], cwd=project, check=True)
    for name, text in originals.items():  # no --write: untouched
        assert (project / name).read_text() == text

    again = runner.invoke(app, args)
    assert "already done, skipped" in again.stderr
    rows_after = [json.loads(line) for line in (project / "tasks.jsonl.results.jsonl").read_text().splitlines()]
    failed_first = {row["key"] for row in rows if row["status"] == "failed"}
    assert {row["key"] for row in rows_after[len(rows):]} == failed_first  # only the failures ran again


@pytest.mark.engine
def test_batch_write_replaces_files_that_parse(project):
    (project / "tasks.jsonl").write_text(
        json.dumps({"path": "temperature.py", "instruction": "set FREEZING_F to 32.5"}) + "\n"
        + json.dumps({"path": "broken.py", "instruction": "rename the function area to rectangle_area"}) + "\n"
    )
    broken = BROKEN
    (project / "broken.py").write_text(broken)
    result = runner.invoke(app, ["batch", str(project / "tasks.jsonl"), "--write"])
    assert result.exit_code == 1  # the broken file's task fails, alone
    assert "FREEZING_F = 32.5\n" in (project / "temperature.py").read_text()
    assert (project / "broken.py").read_text() == broken  # does not parse: never written
