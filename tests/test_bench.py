"""`hsedit bench`: workloads, batching, the report and the plot."""

import json

import pytest
from typer.testing import CliRunner

from hsedit.bench import BUILTIN_WORKLOADS, BenchTask, _groups, builtin_workloads, run_bench
from hsedit.cli import app
from hsedit.edit.diff import edit_distance

runner = CliRunner()


def test_groups_fill_every_batch_and_keep_task_order():
    tasks = [BenchTask(str(i), chat=str(i)) for i in range(3)]
    assert [[t.name for t in g] for g in _groups(tasks, 1)] == [["0"], ["1"], ["2"]]
    assert [[t.name for t in g] for g in _groups(tasks, 2)] == [["0", "1"], ["2", "0"]]
    assert [[t.name for t in g] for g in _groups(tasks, 4)] == [["0", "1", "2", "0"]]


def test_the_builtin_workloads_load_from_the_repository():
    loaded = {w.name: w for w in builtin_workloads()}
    assert set(loaded) == set(BUILTIN_WORKLOADS)
    assert all(len(w.tasks) >= 4 for w in loaded.values())
    assert all(t.chat for t in loaded["chat"].tasks)
    edits = loaded["light"].tasks + loaded["heavy"].tasks + loaded["snippet"].tasks
    assert all(t.job and not t.job.instruction for t in edits)  # lazy-snippet merges
    # mixed: light edits and chat prompts alternating, so any batch of 4 or 16 holds half of each
    mixed = loaded["mixed"].tasks
    assert [bool(t.chat) for t in mixed] == [False, True] * (len(mixed) // 2)
    assert {t.name for t in mixed if t.job} == {t.name for t in loaded["light"].tasks}


def test_edit_distance():
    assert edit_distance("a = 1\n", "a = 1\n") == 0.0
    assert edit_distance("x = 1", "y = 2") == pytest.approx(2 / 3)  # 'x', '1' changed of 'x = 1'
    assert edit_distance("", "") == 0.0 and edit_distance("a", "") == 1.0


def test_bad_batch_sizes_and_workloads_are_usage_errors():
    assert runner.invoke(app, ["bench", "--batch-size", "0"]).exit_code == 2
    assert runner.invoke(app, ["bench", "--batch-size", "two"]).exit_code == 2
    assert runner.invoke(app, ["bench", "--workloads", "huge"]).exit_code == 2
    assert runner.invoke(app, ["bench", "--drafters", "magic"]).exit_code == 2


@pytest.mark.engine
def test_a_small_bench_runs_batches_checks_exactness_and_plots(tmp_path, plain_engine, copy_engine):
    light = builtin_workloads(["light"])[0]
    small = type(light)("light", light.tasks[:2])
    report = run_bench([small], ["none", "ngram"], batch_sizes=[1, 2])
    assert report.exact
    rows = {(c.batch_size, c.method): c for c in report.cells}
    assert set(rows) == {(1, "none"), (1, "ngram"), (2, "none"), (2, "ngram")}
    assert rows[(2, "none")].tokens == rows[(1, "none")].tokens  # same two tasks, run together
    assert rows[(1, "ngram")].accepted["ngram"] > 0
    assert report.ratio(rows[(1, "ngram")], "none") > 0
    assert report.edit_distance["light"] is not None and 0.0 <= report.edit_distance["light"] < 1.0
    positions = rows[(1, "ngram")].acceptance_by_position()["ngram"]
    assert positions and all(0.0 <= p <= 1.0 for p in positions)

    from hsedit.plot import plot_report

    png = plot_report(report, tmp_path / "bench.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(json.dumps(report.as_dict()))
    assert data["exact"] and len(data["rows"]) == 4
