"""What the bench runs: built-in workloads (`benchmarks/*.jsonl`, shipped inside the wheel) or
the user's own task file, each at the scopes asked for (whole files, or the regions
`hsedit apply --scope regions` sends)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hsedit.apply import EditJob
from hsedit.edit.files import read_source
from hsedit.errors import UsageError
from hsedit.tasks import is_edit, task_lines

BUILTIN_WORKLOADS = ("light", "heavy", "snippet", "chat", "mixed", "large")
SCOPE_SUFFIX = "·regions"
WHOLE_FILE_CONTEXT = 8192  # the default model's


@dataclass(frozen=True)
class BenchTask:
    name: str
    job: EditJob | None = None  # an edit (or one region of it) ...
    chat: str | None = None  # ... or a chat prompt
    file_tokens_of: EditJob | None = None  # the whole edit this task is (part of): its file counts once


@dataclass(frozen=True)
class Workload:
    name: str
    tasks: list[BenchTask]
    scope: str = "file"  # file: whole files; regions: each edit's regions as requests of their own


def builtin_dir() -> Path:
    package = Path(__file__).resolve().parent.parent
    packaged = package / "benchmarks"  # inside an installed wheel
    return packaged if packaged.is_dir() else package.parent / "benchmarks"


def builtin_workloads(names: Sequence[str] = BUILTIN_WORKLOADS) -> list[Workload]:
    return [Workload(name, load_tasks(builtin_dir() / f"{name}.jsonl")) for name in names]


def load_tasks(path: str | Path) -> list[BenchTask]:
    """Edits ({"path", "instruction"} or {"path", "update"}) and chat prompts ({"prompt"})."""
    path = Path(path)
    tasks = []
    for number, _line, item in task_lines(path):
        if is_edit(item):
            source = read_source(path.parent / item["path"])
            job = EditJob.for_source(source, item["path"], item.get("instruction", ""), item.get("update"))
            what = item.get("instruction") or "merge an update"
            tasks.append(BenchTask(f"{item['path']}: {what}", job=job, file_tokens_of=job))
        elif isinstance(item.get("prompt"), str):
            tasks.append(BenchTask(f"chat: {item['prompt'][:40]}", chat=item["prompt"]))
        else:
            raise UsageError(f'{path}:{number}: expected {{"path", "instruction"}}, {{"path", "update"}} or {{"prompt"}}')
    return tasks


def chosen_workloads(tasks: Path | None, names: str | None, scopes: Sequence[str] = ("file",),
                     fits: Callable[[EditJob], bool] | None = None) -> list[Workload]:
    """Your own task file, or built-in workloads by comma-separated name (all by default but
    `large`), each at every scope given: `regions` makes a workload of the regions its edits are
    cut into (chat and what cannot be cut stay as they are; a workload with nothing to cut is not
    repeated). At `file`, edits that `fits` says do not fit the model's context are left out."""
    fits = fits or fits_whole
    if tasks is not None:
        loaded = [Workload(tasks.stem, load_tasks(tasks))]
    else:
        default = ",".join(w for w in BUILTIN_WORKLOADS if w != "large")
        wanted = [w.strip() for w in (names or default).split(",") if w.strip()]
        unknown = set(wanted) - set(BUILTIN_WORKLOADS)
        if unknown:
            raise UsageError(f"unknown workload {', '.join(sorted(unknown))}; choose from {', '.join(BUILTIN_WORKLOADS)}")
        loaded = builtin_workloads(wanted)
    out = []
    for workload in loaded:
        for scope in scopes:
            if scope == "regions":
                cut = in_regions(workload)
                if cut is not None:
                    out.append(cut)
                continue
            kept = [t for t in workload.tasks if t.job is None or fits(t.job)]
            if kept:
                out.append(Workload(workload.name, kept))
    return out


def in_regions(workload: Workload) -> Workload | None:
    """The workload as `--scope regions` runs it: each edit's regions, requests of their own."""
    from hsedit.scope import plan_edit

    tasks, cut = [], False
    for task in workload.tasks:
        plan = plan_edit(task.job, "regions") if task.job is not None and _can_cut(task.job) else None
        if plan is None:
            tasks.append(task)
            continue
        cut = True
        for k, part in enumerate(plan.parts):
            tasks.append(BenchTask(f"{task.name} [{part.region.label}]", job=part.job,
                                   file_tokens_of=task.job if k == 0 else None))
    return Workload(workload.name + SCOPE_SUFFIX, tasks, "regions") if cut else None


def fits_whole(job: EditJob) -> bool:
    """Whether a whole-file rewrite fits the default model's context (the file twice, with room)."""
    from hsedit.edit.regions import estimated_tokens

    return 2 * estimated_tokens(job.source.text) + 512 <= WHOLE_FILE_CONTEXT


def _can_cut(job: EditJob) -> bool:
    from hsedit.edit.check import Source

    return job.source.path.suffix == ".py" and not Source(job.source.text).root.has_error


def groups(tasks: list[BenchTask], batch_size: int) -> list[list[BenchTask]]:
    """Batches of `batch_size` tasks; a workload smaller than the batch repeats its tasks."""
    count = max(len(tasks), batch_size)
    count += (-count) % batch_size
    cycled = [tasks[i % len(tasks)] for i in range(count)]
    return [cycled[i : i + batch_size] for i in range(0, count, batch_size)]
