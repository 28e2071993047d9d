"""`hsedit batch`: many edits from a task file, concurrently in one engine, resumable.

Task lines are those of `hsedit bench`: {"path", "instruction"} or {"path", "update"} (a
lazy-snippet merge), paths relative to the task file. Each finished task is appended to a
results file as it completes, so a rerun skips what already succeeded and retries the rest.
One task failing (missing file, truncated output, output that does not parse) is recorded and
never stops or touches the others. Two tasks on the same file are refused up front: their
edits would be made against the same original and could not both apply.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hsedit.apply import EditJob, EditResult, edit_request, finish_edit
from hsedit.edit.files import atomic_write, read_source
from hsedit.engine.engine import Engine, Generation, GenerationRequest, StepEvent
from hsedit.errors import HseditError, UsageError
from hsedit.tasks import is_edit, task_lines

OK, UNCHANGED, FAILED = "ok", "unchanged", "failed"


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
    status: str  # ok | unchanged | failed
    error: str | None = None
    exit_code: int | None = None
    diff: str = ""
    written: bool = False
    stats: dict = field(default_factory=dict)


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


def _latest_results(results_file: Path) -> dict[str, dict]:
    """The last recorded result of each task key; a line cut short by a crash is ignored."""
    latest: dict[str, dict] = {}
    if not results_file.is_file():
        return latest
    for line in results_file.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # that task runs again
        latest[row["key"]] = row
    return latest


def finished_keys(results_file: Path) -> set[str]:
    """Tasks that already succeeded in an earlier run."""
    return {key for key, row in _latest_results(results_file).items() if row.get("status") in (OK, UNCHANGED)}


def run_batch(
    engine: Engine,
    tasks: Sequence[BatchTask],
    results_file: Path,
    *,
    write: bool = False,
    max_batch: int = 8,
    max_tokens: int | None = None,
    on_step: Callable[[StepEvent], None] | None = None,
    on_done: Callable[[TaskOutcome], None] | None = None,
) -> list[TaskOutcome]:
    skip = finished_keys(results_file)
    pending = [task for task in tasks if task.key not in skip]
    outcomes: list[TaskOutcome] = []

    def record(outcome: TaskOutcome) -> None:
        outcomes.append(outcome)
        with open(results_file, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(asdict(outcome)) + "\n")
        if on_done:
            on_done(outcome)

    ready: list[tuple[BatchTask, EditJob, GenerationRequest]] = []
    for task in pending:
        try:
            if not task.instruction.strip() and task.update is None:
                raise UsageError("the instruction is empty")
            job = EditJob.for_source(read_source(task.path), task.display_path, task.instruction, task.update)
            ready.append((task, job, edit_request(engine, job, max_tokens=max_tokens)))
        except HseditError as error:
            record(_failure(task, error))
    for start in range(0, len(ready), max_batch):
        window = ready[start : start + max_batch]
        generations = engine.generate([request for _, _, request in window], on_step=on_step)
        for (task, job, request), generation in zip(window, generations):
            record(_finish(task, job, request, generation, write))
    return outcomes


def _finish(task: BatchTask, job: EditJob, request: GenerationRequest, generation: Generation, write: bool) -> TaskOutcome:
    try:
        result: EditResult = finish_edit(job, generation, request)
    except HseditError as error:
        return _failure(task, error, generation.stats.as_dict())
    stats = result.stats.as_dict()
    if not result.validation.ok:
        return TaskOutcome(
            task.key, task.display_path, FAILED, f"does not parse ({result.validation.message})", 6, result.diff, False, stats
        )
    if not result.changed:
        return TaskOutcome(task.key, task.display_path, UNCHANGED, stats=stats)
    written = False
    if write:
        atomic_write(task.path, result.new_text)
        written = True
    return TaskOutcome(task.key, task.display_path, OK, None, None, result.diff, written, stats)


def _failure(task: BatchTask, error: HseditError, stats: dict | None = None) -> TaskOutcome:
    return TaskOutcome(task.key, task.display_path, FAILED, str(error), error.exit_code, stats=stats or {})


def combined_patch(tasks: Sequence[BatchTask], results_file: Path) -> str:
    """One patch of every task that succeeded, in this run or an earlier one (latest result wins)."""
    latest = _latest_results(results_file)
    rows = [latest[t.key] for t in tasks if t.key in latest and latest[t.key]["status"] == OK]
    return "".join(row["diff"] for row in sorted(rows, key=lambda row: row["path"]))
