"""Accounting arithmetic and the bench's task file, without an engine."""

import json

import pytest

from hsedit.bench import load_tasks
from hsedit.drafting.chain import COPY, TARGET, VLLM_NGRAM
from hsedit.drafting.chain import StepRecord
from hsedit.engine.stats import RequestStats
from hsedit.errors import UsageError
from hsedit.ui import status_line


def step(source, drafted, matched, emitted):
    return StepRecord(source, drafted, matched, tuple(range(emitted)))


def stats_with(steps, reported=None):
    stats = RequestStats(prompt_tokens=10, plain_estimate_s=0.05, started_at=100.0)
    for i, record in enumerate(steps):
        stats.record(record, now=100.5 + i * 0.05)
    stats.finished_at = 100.5 + (len(steps) - 1) * 0.05
    stats.engine_reported = reported
    return stats


def test_counts_add_up_per_source():
    stats = stats_with([step(None, 0, 0, 1), step(COPY, 8, 5, 6), step(COPY, 4, 0, 1)])
    assert stats.completion_tokens == 8
    assert stats.accepted_prediction_tokens == 5 and stats.rejected_prediction_tokens == 7
    assert stats.tokens_by_source() == {COPY: 5, TARGET: 3}
    assert stats.tokens_per_step == pytest.approx(8 / 3)
    # 7 tokens after the first in 0.1 s, against 0.05 s per plain step: 3.5x.
    assert stats.speedup_estimate() == pytest.approx(3.5)
    report = stats.as_dict()
    assert report["drafters"] == {COPY: {"drafted": 12, "accepted": 5}}
    assert "copy 5/12" in status_line(stats, now=stats.finished_at)


def test_vllm_ngram_drafts_come_from_vllms_own_count():
    stats = stats_with([step(None, 0, 0, 1), step(VLLM_NGRAM, 0, 3, 4)], reported=(10, 3))
    assert stats.drafted[VLLM_NGRAM] == 10 and stats.rejected_prediction_tokens == 7


def test_task_file_lines(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"path": "a.py", "instruction": "set x to 2"}) + "\n\n" + json.dumps({"prompt": "hello"}) + "\n"
    )
    edit, chat = load_tasks(tasks)
    assert edit.job.source.text == "x = 1\n" and edit.job.instruction == "set x to 2"
    assert chat.chat == "hello" and chat.job is None


@pytest.mark.parametrize(
    "line,message",
    [("{not json", "not JSON"), (json.dumps({"path": "a.py"}), "expected"), (json.dumps([1]), "expected")],
)
def test_bad_task_lines_name_the_line(tmp_path, line, message):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(line + "\n")
    with pytest.raises(UsageError, match=f"tasks.jsonl:1: {message}"):
        load_tasks(tasks)


def test_missing_task_file(tmp_path):
    with pytest.raises(UsageError, match="no such task file"):
        load_tasks(tmp_path / "none.jsonl")
