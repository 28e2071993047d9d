"""`hsedit batch`: many edits from a task file, concurrently in one engine, resumable.

Task lines are those of `hsedit bench`: {"path", "instruction"} or {"path", "update"} (a
lazy-snippet merge), paths relative to the task file. Each finished task is appended to a
results file as it completes, so a rerun skips what already succeeded and retries the rest.
Up to `max_batch` edits run at once and the next task joins the engine's batch as soon as one
finishes, so one long answer never holds the others back. One task failing (missing file,
truncated output, output that does not parse, an answer the write guard refuses, a file changed
while it ran) is recorded and never stops or touches the others.

The results file is a journal that survives `kill -9` at any moment: every record is one line,
written with a newline before it when a crash left the file without one, and synced. Before a
file is replaced, a "writing" record names the text it will hold (its hash); a rerun that finds
a "writing" record without its outcome looks at the file: if it already holds that text the
write happened and is recorded, otherwise the task runs again. So no file is written twice. Two tasks on the same file are refused up front: their
edits would be made against the same original and could not both apply.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from hsedit.apply import EditJob, EditResult, EditRunner, write_result
from hsedit.config import AUTO
from hsedit.edit.files import read_source
from hsedit.edit.guard import DEFAULT_MAX_DELETION
from hsedit.engine.requests import StepEvent
from hsedit.errors import HseditError, UsageError
from hsedit.scope import generate_edits
from hsedit.tasks import is_edit, task_lines

OK, UNCHANGED, FAILED = "ok", "unchanged", "failed"
WRITING = "writing"  # journal only: the file is about to be replaced


@dataclass(frozen=True)
class BatchTask:
    key: str  # stable identity of the task line: what the results file remembers
    path: Path
    display_path: str
    instruction: str
    update: str | None


@dataclass
class TaskOutcome:
    key: str
    path: str
    status: str  # ok | unchanged (a checked "nothing to do", or an unchecked instruction) | failed
    error: str | None = None
    exit_code: int | None = None
    diff: str = ""
    written: bool = False
    stats: dict = field(default_factory=dict)
    check: dict = field(default_factory=dict)  # the instruction check's verdict: kind, ok, reason


def default_results_file(task_file: Path) -> Path:
    """TASKS.results.jsonl beside the task file: a rerun finds what the last run finished."""
    return task_file.with_name(task_file.name + ".results.jsonl")


def exit_status(outcomes: Sequence[TaskOutcome]) -> int:
    """`hsedit batch`'s exit status: 1 if any task failed (its file untouched), else 0."""
    return 1 if any(o.status == FAILED for o in outcomes) else 0


def load_batch(task_file: str | Path) -> list[BatchTask]:
    task_file = Path(task_file)
    tasks: list[BatchTask] = []
    seen: dict[Path, int] = {}
    for number, line, item in task_lines(task_file):
        if not is_edit(item):
            raise UsageError(f'{task_file}:{number}: expected {{"path", "instruction"}} or {{"path", "update"}}')
        path = (task_file.parent / item["path"]).resolve()
        if path in seen:
            raise UsageError(
                f"{task_file}:{number}: {item['path']} is already edited by line {seen[path]}; "
                "put both changes in one task"
            )
        seen[path] = number
        key = hashlib.sha1(line.strip().encode()).hexdigest()[:16]
        tasks.append(BatchTask(key, path, item["path"], item.get("instruction", ""), item.get("update")))
    return tasks


class ResultsJournal:
    """The results file: one JSON record a line, appended and synced; the last record of a task
    is its state."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def latest(self) -> dict[str, dict]:
        """The last record of each task key; a line cut short by a crash is ignored."""
        latest: dict[str, dict] = {}
        if not self.path.is_file():
            return latest
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # that task runs again
            if isinstance(row, dict) and isinstance(row.get("key"), str):
                latest[row["key"]] = row
        return latest

    def append(self, row: dict) -> None:
        line = (json.dumps(row) + "\n").encode("utf-8")
        with open(self.path, "a+b") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() > 0:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":  # a crash cut the last record short: never glue onto it
                    line = b"\n" + line
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def pending(self, tasks: Sequence[BatchTask], *, write: bool) -> list[BatchTask]:
        """The tasks still to run. Done: unchanged, or ok (and written, when this run writes).
        A write interrupted between its "writing" record and its outcome is settled here."""
        latest = self.latest()
        todo = []
        for task in tasks:
            row = latest.get(task.key)
            if row is not None and row.get("status") == WRITING:
                row = self._settle_interrupted_write(task, row)
            if row is not None and (
                row.get("status") == UNCHANGED or (row.get("status") == OK and (row.get("written") or not write))
            ):
                continue
            todo.append(task)
        return todo

    def _settle_interrupted_write(self, task: BatchTask, row: dict) -> dict | None:
        try:
            current = hashlib.sha256(task.path.read_bytes()).hexdigest()
        except OSError:
            return None
        if current != row.get("after_sha256"):
            return None  # the write did not happen: run the task again
        settled = {k: v for k, v in row.items() if k != "after_sha256"} | {"status": OK, "written": True}
        self.append(settled)
        return settled


def run_batch(
    runner: EditRunner,
    tasks: Sequence[BatchTask],
    results_file: Path,
    *,
    write: bool = False,
    force: bool = False,
    max_batch: int = 8,
    max_tokens: int | None = None,
    max_deletion: float = DEFAULT_MAX_DELETION,
    scope: str = AUTO,
    on_step: Callable[[StepEvent], None] | None = None,
    on_done: Callable[[TaskOutcome], None] | None = None,
) -> list[TaskOutcome]:
    """`max_batch`: requests in the engine at once (an edit by regions makes one per region)."""
    journal = ResultsJournal(results_file)
    pending = journal.pending(tasks, write=write)
    outcomes: list[TaskOutcome] = []

    def record(outcome: TaskOutcome) -> None:
        outcomes.append(outcome)
        journal.append(asdict(outcome))
        if on_done:
            on_done(outcome)

    started: list[tuple[BatchTask, EditJob]] = []  # by job position

    def jobs() -> Iterator[EditJob]:
        """Read each task's file only when the runner has room for it."""
        for task in pending:
            try:
                if not task.instruction.strip() and task.update is None:
                    raise UsageError("the instruction is empty")
                job = EditJob.for_source(read_source(task.path), task.display_path, task.instruction, task.update)
            except HseditError as error:
                record(_failure(task, error))
                continue
            started.append((task, job))
            yield job

    finished = generate_edits(
        runner, jobs(), scope=scope, max_tokens=max_tokens, max_in_flight=max_batch, on_step=on_step,
        max_deletion=max_deletion,
    )
    for index, result in finished:
        task, _job = started[index]
        if isinstance(result, HseditError):
            record(_failure(task, result))
            continue
        record(finish_task(task, result, journal, write=write, force=force))
    return outcomes


def finish_task(task: BatchTask, result: EditResult, journal: ResultsJournal, *, write: bool, force: bool) -> TaskOutcome:
    stats = result.stats.as_dict()
    check = result.check.as_dict()
    refusal = result.refusal()
    if refusal is not None and not force:
        return replace(_failure(task, refusal, stats, result.diff), check=check)
    if not result.changed:
        return TaskOutcome(task.key, task.display_path, UNCHANGED, stats=stats, check=check)
    outcome = TaskOutcome(task.key, task.display_path, OK, diff=result.diff, stats=stats, check=check)
    if write:
        after = hashlib.sha256(result.new_text.encode("utf-8")).hexdigest()
        journal.append(asdict(outcome) | {"status": WRITING, "after_sha256": after})
        try:
            write_result(result, force=force)
        except HseditError as error:
            return _failure(task, error, stats, result.diff)
        outcome.written = True
    return outcome


def _failure(task: BatchTask, error: HseditError, stats: dict | None = None, diff: str = "") -> TaskOutcome:
    return TaskOutcome(task.key, task.display_path, FAILED, str(error), error.exit_code, diff, stats=stats or {})


def combined_patch(tasks: Sequence[BatchTask], results_file: Path) -> str:
    """One patch of every task that succeeded, in this run or an earlier one (latest result wins)."""
    latest = ResultsJournal(results_file).latest()
    rows = [latest[t.key] for t in tasks if t.key in latest and latest[t.key]["status"] == OK]
    return "".join(row["diff"] for row in sorted(rows, key=lambda row: row["path"]))
