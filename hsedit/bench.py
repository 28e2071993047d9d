"""`hsedit bench`: drafting methods side by side on the same workloads, interleaved in one run.

The machine is noisy, so for every workload and batch size the methods take turns (the order
rotates) and speed is reported as ratios from the same run. A batch size b runs b requests
concurrently in one engine (the workload's tasks, repeated if there are fewer than b). Every
output is checked token for token against plain decoding at the same batch size: a drafter
that changes the output is a bug, not a speedup.

A method is a drafter name, optionally with its maximum draft and the target's dtype:
`hybrid@15`, `vllm-ngram@63`, `hybrid:float32` (without: the engine's defaults, 31 for the
hybrid and 15 for the others, and `--dtype auto`). Every dtype in use gets its own plain
decoding, which its methods are compared with and checked against.

A workload runs at each scope asked for (`--scope file,regions`): the whole file per edit, or
the regions `hsedit apply --scope regions` sends, each region a request (a workload of edits it
cannot cut runs whole). `s/run` is the time the workload's requests took at that batch size, so
two scopes of one workload compare by it; `of file` is the tokens generated over the tokens of
the files edited. vLLM's own drafters
run each in a process of its own: once one has loaded numba, vLLM 0.32 on CPU starts no further
engine in that process. Every row also gets the all-accepted limit of its workload: prefilling
each group's prompts (as measured) plus verifying its answers in maximal chains (from the cost
table) — no drafter can finish sooner — and the share of that limit the method reached.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import multiprocessing
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hsedit.apply import EditJob, edit_request, finish_edit
from hsedit.drafting.chain import DSPARK, HYBRID, COPY, NO_DRAFTER, VLLM_BUILTINS, VLLM_NGRAM, VLLM_SUFFIX
from hsedit.edit.diff import edit_distance
from hsedit.edit.files import read_source
from hsedit.engine.costs import CostTable
from hsedit.engine.engine import Engine, EngineOptions, Generation, GenerationRequest, shared_engine
from hsedit.engine.provision import DrafterTarget
from hsedit.errors import OutputTruncatedError, UsageError
from hsedit.tasks import is_edit, task_lines

DEFAULT_METHODS = (NO_DRAFTER, COPY, DSPARK, HYBRID)
BUILTIN_WORKLOADS = ("light", "heavy", "snippet", "chat", "mixed", "large")
SCOPE_SUFFIX = "·regions"
CHAT_MAX_TOKENS = 192


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


@dataclass
class Cell:
    """One method on one workload at one batch size, summed over its runs."""

    workload: str
    batch_size: int
    method: str
    scope: str = "file"
    runs: int = 0  # times the whole workload ran (its groups, once each)
    file_tokens: int = 0  # tokens of the files its edits rewrote, summed over runs
    tokens: int = 0
    seconds: float = 0.0
    request_steps: int = 0  # engine steps summed over requests
    drafted: Counter = field(default_factory=Counter)  # per drafter
    accepted: Counter = field(default_factory=Counter)
    proposer_seconds: float = 0.0
    proposer_steps: int = 0
    model_drafted: int = 0  # request-steps the DSpark pass ran for
    model_skipped: int = 0  # request-steps the hybrid's cost rule skipped it
    # per drafter: [times slot k was verified, times it was accepted], k = 1, 2, ...
    positions: dict = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)
    skipped: str | None = None  # why the method could not run
    # sha256 of every output's token ids in task order (the first round): equal digests across
    # two runs or two versions of hsedit mean token-identical outputs.
    output_sha256: str | None = None
    # The all-accepted limit of the same groups (prefill + answers in maximal chains), and the
    # time until every group's first token (prefill, mostly), both summed over runs.
    limit_seconds: float = 0.0
    prefill_seconds: float = 0.0

    @property
    def seconds_per_run(self) -> float | None:
        return self.seconds / self.runs if self.runs else None

    @property
    def of_file(self) -> float | None:
        """Tokens generated over the tokens of the files edited."""
        return self.tokens / self.file_tokens if self.file_tokens else None

    @property
    def limit_share(self) -> float | None:
        """Share of the all-accepted limit reached: limit time / actual time."""
        return self.limit_seconds / self.seconds if self.seconds and self.limit_seconds else None

    @property
    def prefill_share(self) -> float | None:
        return self.prefill_seconds / self.seconds if self.seconds else None

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.request_steps if self.request_steps else 0.0

    @property
    def proposer_ms_per_step(self) -> float | None:
        return 1000 * self.proposer_seconds / self.proposer_steps if self.proposer_steps else None

    @property
    def model_run_share(self) -> float | None:
        """Share of request-steps the model drafter ran for (None: the method has none)."""
        total = self.model_drafted + self.model_skipped
        return self.model_drafted / total if total else None

    def acceptance_by_position(self) -> dict[str, list[float]]:
        """Per drafter: P(slot k accepted | slots before it accepted), as verification found it."""
        out = {}
        for name, (verified, accepted) in sorted(self.positions.items()):
            reached = [k for k, v in enumerate(verified) if v]
            out[name] = [round(accepted[k] / verified[k], 3) for k in range(reached[-1] + 1)] if reached else []
        return out

    def acceptance(self) -> dict[str, tuple[int, int]]:
        return {name: (self.accepted[name], self.drafted[name]) for name in sorted(self.drafted) if self.drafted[name]}


@dataclass
class BenchReport:
    cells: list[Cell]
    workloads: dict[str, list[str]]  # workload -> task names
    edit_distance: dict[str, float | None]  # workload -> mean over its plain outputs
    refused: dict[str, list[str]]  # workload -> edits whose plain output the write guard refuses
    check_failed: dict[str, list[str]]  # workload -> edits whose plain output fails the instruction check
    batch_sizes: list[int]
    repeats: int
    methods: list[str]
    # the plain engine's one-token step time (its cost table): the yardstick for proposer time
    plain_step_ms: float | None = None
    # per method: its engine's cost table, [(scheduled tokens, ms)], as profiled at its start
    cost_tables: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    # per method with a DSpark drafter: whether it was trained for the target (DrafterTarget)
    dspark_targets: dict[str, DrafterTarget] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return not any(c.mismatches for c in self.cells)

    def cell(self, workload: str, batch_size: int, method: str) -> Cell | None:
        return next(
            (c for c in self.cells if (c.workload, c.batch_size, c.method) == (workload, batch_size, method)), None
        )

    def ratio_to_best(self, cell: Cell, family: str) -> float | None:
        """Against the fastest of a drafter's settings (`vllm-ngram`, `vllm-ngram@63`, ...)."""
        rivals = [c for c in self.cells if (c.workload, c.batch_size) == (cell.workload, cell.batch_size)
                  and method_name(c.method) == family and dtype_of(c.method) == dtype_of(cell.method)
                  and c.tokens_per_second]
        if not rivals or not cell.tokens_per_second:
            return None
        return cell.tokens_per_second / max(c.tokens_per_second for c in rivals)

    def ratio(self, cell: Cell, baseline: str) -> float | None:
        """Against `baseline` (a drafter name) at the cell's own dtype."""
        dtype = dtype_of(cell.method)
        base = self.cell(cell.workload, cell.batch_size, baseline if dtype == "auto" else f"{baseline}:{dtype}")
        if base is None or not base.tokens_per_second or not cell.tokens_per_second:
            return None
        return cell.tokens_per_second / base.tokens_per_second

    def as_dict(self) -> dict:
        return {
            "workloads": self.workloads,
            "edit_distance": {k: _round(v) for k, v in self.edit_distance.items()},
            "refused_by_guard": self.refused,
            "check_failed": self.check_failed,
            "batch_sizes": self.batch_sizes,
            "repeats": self.repeats,
            "exact": self.exact,
            "plain_step_ms": _round(self.plain_step_ms),
            "cost_tables_ms": self.cost_tables,
            "dspark_targets": {method: target.as_dict() for method, target in self.dspark_targets.items()},
            "rows": [
                {
                    "workload": c.workload,
                    "batch_size": c.batch_size,
                    "method": c.method,
                    "scope": c.scope,
                    "seconds_per_run": _round(c.seconds_per_run),
                    "tokens_of_file": _round(c.of_file),
                    "skipped": c.skipped,
                    "tokens": c.tokens,
                    "seconds": round(c.seconds, 3),
                    "tokens_per_second": round(c.tokens_per_second, 3),
                    "ratio_to_plain": _round(self.ratio(c, NO_DRAFTER)),
                    "ratio_to_dspark": _round(self.ratio(c, DSPARK)),
                    "ratio_to_copy": _round(self.ratio(c, COPY)),
                    "tokens_per_step": round(c.tokens_per_step, 3),
                    "acceptance": {k: {"accepted": a, "drafted": d} for k, (a, d) in c.acceptance().items()},
                    "acceptance_by_position": c.acceptance_by_position(),
                    "proposer_ms_per_step": _round(c.proposer_ms_per_step),
                    "limit_seconds": _round(c.limit_seconds),
                    "limit_share": _round(c.limit_share),
                    "prefill_share": _round(c.prefill_share),
                    "ratio_to_best_vllm_ngram": _round(self.ratio_to_best(c, VLLM_NGRAM)),
                    "dspark_run_share": _round(c.model_run_share),
                    "mismatches": c.mismatches,
                    "output_sha256": c.output_sha256,
                }
                for c in self.cells
            ],
        }


# -- workloads ------------------------------------------------------------------------------
def builtin_dir() -> Path:
    packaged = Path(__file__).resolve().parent / "benchmarks"  # inside an installed wheel
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "benchmarks"


def builtin_workloads(names: Sequence[str] = BUILTIN_WORKLOADS) -> list[Workload]:
    return [Workload(name, load_tasks(builtin_dir() / f"{name}.jsonl")) for name in names]


def chosen_workloads(tasks: Path | None, names: str | None, scopes: Sequence[str] = ("file",),
                     fits: Callable[[EditJob], bool] | None = None) -> list[Workload]:
    fits = fits or _fits_whole
    """Your own task file, or built-in workloads by comma-separated name (all by default but
    `large`), each at every scope given: `regions` makes a workload of the regions its edits are
    cut into (chat and what cannot be cut stay as they are; a workload with nothing to cut is not
    repeated). At `file`, edits that `fits` says do not fit the model's context are left out."""
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


WHOLE_FILE_CONTEXT = 8192  # the default model's


def _fits_whole(job: EditJob) -> bool:
    """Whether a whole-file rewrite fits the default model's context (the file twice, with room)."""
    from hsedit.edit.regions import estimated_tokens

    return 2 * estimated_tokens(job.source.text) + 512 <= WHOLE_FILE_CONTEXT


def _can_cut(job: EditJob) -> bool:
    from hsedit.edit.check import Source

    return job.source.path.suffix == ".py" and not Source(job.source.text).root.has_error


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


# -- running --------------------------------------------------------------------------------
def run_bench(
    workloads: Sequence[Workload],
    methods: Sequence[str] = DEFAULT_METHODS,
    batch_sizes: Sequence[int] = (1,),
    repeats: int = 1,
    engine_for: Callable[[str], Engine] | None = None,
    on_run: Callable[[str, str, int, int], None] | None = None,
) -> BenchReport:
    engine_for = engine_for or engine_for_method
    methods = list(dict.fromkeys([NO_DRAFTER, *methods]))
    methods = list(dict.fromkeys([*(plain_for(m) for m in methods), *methods]))  # each dtype's plain first
    engines: dict[str, Engine] = {}
    skipped: dict[str, str] = {}
    # Start every engine before timing anything (vLLM's own drafters start in child processes).
    for method in sorted(methods, key=lambda m: method_name(m) in VLLM_BUILTINS):
        try:
            engines[method] = engine_for(method)
        except UnavailableMethod as why:
            skipped[method] = str(why)
    # The limit is priced with every engine's cost table at once, the fastest measurement of each
    # size kept: noise only ever adds time, and one table profiled while the machine was busy
    # would otherwise put the limit above what the runs reach.
    samples: dict[int, float] = {}
    for table in (e.cost_table for e in engines.values() if e.cost_table is not None):
        for n, t in zip(table.tokens, table.seconds):
            samples[n] = min(t, samples.get(n, t))
    machine_table = CostTable.from_samples(samples) if samples else None
    cells = {
        (w.name, b, m): Cell(w.name, b, m, w.scope, skipped=skipped.get(m))
        for w in workloads for b in batch_sizes for m in methods
    }
    runnable = [m for m in methods if m in engines]
    outputs: dict[tuple[str, int, str], list[tuple[list[BenchTask], list[list[int]]]]] = {}
    distances: dict[str, list[float]] = {}
    refused: dict[str, list[str]] = {w.name: [] for w in workloads}
    wrong: dict[str, list[str]] = {w.name: [] for w in workloads}
    for repeat in range(repeats):
        for w_index, workload in enumerate(workloads):
            for b_index, batch_size in enumerate(batch_sizes):
                shift = (repeat + w_index + b_index) % len(runnable)
                for method in runnable[shift:] + runnable[:shift]:
                    if on_run:
                        on_run(method, workload.name, batch_size, repeat)
                    engine = engines[method]
                    cell = cells[(workload.name, batch_size, method)]
                    cell.runs += 1
                    cell.file_tokens += sum(engine.count_tokens(t.file_tokens_of.source.text)
                                            for t in workload.tasks if t.file_tokens_of is not None)
                    for group in _groups(workload.tasks, batch_size):
                        requests, results = _run_group(engine, group, cell, machine_table, max_draft_of(method))
                        outputs.setdefault((workload.name, batch_size, method), []).append(
                            (group, [r.token_ids for r in results])
                        )
                        if method == methods[0] and batch_size == batch_sizes[0] and repeat == 0:
                            for task, request, result in zip(group, requests, results):
                                if task.job is None:
                                    continue
                                distance, guard_refuses, check_fails = _judge(task.job, result, request)
                                if distance is not None:
                                    distances.setdefault(workload.name, []).append(distance)
                                if guard_refuses and task.name not in refused[workload.name]:
                                    refused[workload.name].append(task.name)
                                if check_fails and task.name not in wrong[workload.name]:
                                    wrong[workload.name].append(task.name)
    for (workload, batch_size, method), runs in outputs.items():
        first_round = [ids for _, group_ids in runs[: len(runs) // repeats] for ids in group_ids]
        cells[(workload, batch_size, method)].output_sha256 = hashlib.sha256(json.dumps(first_round).encode()).hexdigest()
        reference = outputs[(workload, batch_size, plain_for(method))]  # the same groups, in the same order
        for (group, ids), (_, ref_ids) in zip(runs, reference):
            for task, mine, theirs in zip(group, ids, ref_ids):
                if mine != theirs and task.name not in cells[(workload, batch_size, method)].mismatches:
                    cells[(workload, batch_size, method)].mismatches.append(task.name)
    return BenchReport(
        cells=list(cells.values()),
        workloads={w.name: [t.name for t in w.tasks] for w in workloads},
        edit_distance={w.name: (sum(distances[w.name]) / len(distances[w.name]) if distances.get(w.name) else None)
                       for w in workloads},
        refused=refused,
        check_failed=wrong,
        batch_sizes=list(batch_sizes),
        repeats=repeats,
        methods=methods,
        plain_step_ms=1000 * machine_table.step_time(1) if machine_table else None,
        cost_tables={
            method: [(n, round(1000 * t, 2)) for n, t in zip(e.cost_table.tokens, e.cost_table.seconds)]
            for method, e in engines.items() if e.cost_table is not None
        },
        dspark_targets={
            method: e.drafter_target for method, e in engines.items() if e.drafter_target is not None
        },
    )


class UnavailableMethod(Exception):
    """A method that cannot run on this installation (e.g. a missing optional package)."""


def method_name(method: str) -> str:
    """The drafter of a method spec: `hybrid@15:float32` -> `hybrid`."""
    return method.split(":", 1)[0].split("@", 1)[0]


def max_draft_of(method: str) -> int | None:
    """The maximum draft of a method spec, None for the engine's default."""
    _, _, size = method.split(":", 1)[0].partition("@")
    return int(size) if size else None


def dtype_of(method: str) -> str:
    """The target dtype of a method spec (`auto` unless it names one)."""
    _, _, dtype = method.partition(":")
    return dtype or "auto"


def plain_for(method: str) -> str:
    """The plain decoding a method is compared with and checked against: the same dtype."""
    dtype = dtype_of(method)
    return NO_DRAFTER if dtype == "auto" else f"{NO_DRAFTER}:{dtype}"


def check_method(method: str) -> str:
    """The method spec with its drafter's current name (`ngram@15` -> `copy@15`); a one-line
    usage error for an unknown drafter, a bad maximum draft or dtype."""
    from hsedit.config import check_dtype
    from hsedit.drafting.chain import check_drafter

    spec, _, dtype = method.partition(":")
    name = check_drafter(method_name(spec), "--drafters")
    size = spec.partition("@")[2]
    if size and (not size.isdigit() or int(size) < 1):
        raise UsageError(f"--drafters: {method!r}: the maximum draft after @ must be a whole number of at least 1")
    if dtype:
        check_dtype(dtype, f"--drafters: {method!r}: the dtype after :")
    return (f"{name}@{size}" if size else name) + (f":{dtype}" if dtype and dtype != "auto" else "")


def suffix_package_dir() -> Path:
    """Where `make suffix` installs arctic-inference: apart from the project's environment, since
    its vLLM plugin patches every engine that starts where it is importable. Only the child
    process of the `vllm-suffix` method puts it on its path."""
    from hsedit.engine.provision import cache_dir

    return cache_dir() / "arctic-inference"


def engine_for_method(method: str, model: str | None = None, dspark: str | None = None) -> Engine:
    name = method_name(method)
    extra_path = None
    if name == VLLM_SUFFIX and importlib.util.find_spec("arctic_inference") is None:
        if not (suffix_package_dir() / "arctic_inference").is_dir():
            raise UnavailableMethod(
                "vLLM's suffix decoding needs arctic-inference: `make suffix` builds it (from source, about a "
                f"minute) into {suffix_package_dir()}"
            )
        extra_path = str(suffix_package_dir())
    options = EngineOptions(model=model, drafter=name, dspark=dspark, num_speculative_tokens=max_draft_of(method),
                            dtype=dtype_of(method))
    if name in VLLM_BUILTINS:
        like = shared_engine(EngineOptions(model=model, drafter=NO_DRAFTER, dtype=dtype_of(method)))
        return ChildEngine(options, like=like, extra_path=extra_path)
    return shared_engine(options)


class ChildEngine:
    """An engine in a process of its own, for the bench: what `_run_group` needs of an Engine.
    Requests are made (tokenized) here with the parent's engine of the same model."""

    proposer = None
    drafter_target = None  # it runs one of vLLM's own drafters, never DSpark

    def __init__(self, options: EngineOptions, like: Engine, extra_path: str | None = None) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(target=_serve_engine, args=(options, theirs, extra_path), daemon=True)
        self._process.start()
        kind, payload = self._conn.recv()
        if kind != "ready":
            self._process.join(timeout=10)
            raise UnavailableMethod(f"{options.drafter} did not start: {payload}")
        self.cost_table = payload
        self.tokenizer, self.max_model_len = like.tokenizer, like.max_model_len
        self.count_tokens, self.chat_prompt, self.answer_room = like.count_tokens, like.chat_prompt, like.answer_room

    def generate(self, requests: list[GenerationRequest]):
        self._conn.send(list(requests))
        kind, payload = self._conn.recv()
        if kind != "ok":
            raise RuntimeError(f"the child engine failed: {payload}")
        return payload


def _serve_engine(options: EngineOptions, conn, extra_path: str | None = None) -> None:
    import sys

    if extra_path:  # before vLLM starts: it finds its plugins on the path then
        sys.path.insert(0, extra_path)
    from hsedit.engine.engine import Engine

    try:
        engine = Engine(options)
    except Exception as exc:  # reported to the parent as the method's skip reason
        conn.send(("error", " ".join(str(exc).split())[:300]))
        return
    conn.send(("ready", engine.cost_table))
    while (requests := conn.recv()) is not None:
        try:
            conn.send(("ok", engine.generate(requests)))
        except Exception as exc:
            conn.send(("error", str(exc)))


def _groups(tasks: list[BenchTask], batch_size: int) -> list[list[BenchTask]]:
    """Batches of `batch_size` tasks; a workload smaller than the batch repeats its tasks."""
    count = max(len(tasks), batch_size)
    count += (-count) % batch_size
    cycled = [tasks[i % len(tasks)] for i in range(count)]
    return [cycled[i : i + batch_size] for i in range(0, count, batch_size)]


def _run_group(
    engine: Engine, group: list[BenchTask], cell: Cell, table=None, max_draft: int | None = None
) -> tuple[list[GenerationRequest], list[Generation]]:
    proposer = engine.proposer
    before = proposer.timings() if proposer else None
    requests = [_request(engine, task) for task in group]
    started = time.perf_counter()
    results = engine.generate(requests)
    cell.seconds += time.perf_counter() - started
    first = [r.stats.ttft_s for r in results if r.stats.ttft_s is not None]
    cell.prefill_seconds += max(first) if first else 0.0  # until every request of the group is running
    if table is not None:
        # From the group's first token on (later prompts' prefill overlaps decoding: counting it
        # again would put the limit above what a run can do).
        chain = 1 + (max_draft if max_draft is not None else _default_max_draft(cell.method))
        decoding = all_accepted_limit(table, [r.stats.completion_tokens for r in results], chain)
        cell.limit_seconds += (min(first) if first else 0.0) + decoding
    for result in results:
        stats = result.stats
        cell.tokens += stats.completion_tokens
        cell.request_steps += len(stats.steps)
        cell.drafted.update(stats.drafted)
        cell.accepted.update(stats.accepted)
        for step in stats.steps:
            if step.source and step.drafted:
                verified, accepted = cell.positions.setdefault(step.source, ([], []))
                # Slot k was verified if every earlier slot was accepted; matched counts what
                # verification kept even where max_tokens cut the output short.
                reached = min(step.drafted, step.matched + 1)
                while len(verified) < reached:  # any chain length: the hybrid verifies up to 31 or 63
                    verified.append(0)
                    accepted.append(0)
                for k in range(reached):
                    verified[k] += 1
                    accepted[k] += k < step.matched
    if proposer:
        after = proposer.timings()
        cell.proposer_seconds += after.seconds - before.seconds
        cell.proposer_steps += after.calls - before.calls
        cell.model_drafted += after.model_drafted - before.model_drafted
        cell.model_skipped += after.model_skipped - before.model_skipped
    return requests, results


def all_accepted_limit(table, answer_tokens: list[int], chain: int) -> float:
    """Seconds of decoding no drafter can beat for one group after its prefill (the first token
    comes with it): each step verifies `chain` tokens (a full draft and the target's own) for
    every request still running. The prefill itself is taken as measured: prefix caching makes
    a repeated prompt nearly free, which no cost table knows."""
    seconds = 0.0
    remaining = sorted(math.ceil(max(0, n - 1) / chain) for n in answer_tokens)  # steps per request
    done = 0
    for i, steps in enumerate(remaining):  # requests finish in order of their step counts
        seconds += (steps - done) * table.step_time(chain * (len(remaining) - i))
        done = steps
    return seconds


def _default_max_draft(method: str) -> int:
    if method_name(method) == NO_DRAFTER:
        return 0
    return EngineOptions(drafter=method_name(method)).max_draft


def _request(engine: Engine, task: BenchTask) -> GenerationRequest:
    if task.job is not None:
        return edit_request(engine, task.job)
    return GenerationRequest(engine.chat_prompt(task.chat), max_tokens=CHAT_MAX_TOKENS)


def _judge(job: EditJob, generation: Generation, request: GenerationRequest) -> tuple[float | None, bool, bool]:
    """An edit's answer as `hsedit apply` takes it (`finish_edit`): the edit distance between
    the file and the one the model wrote (None for an answer cut off by max_tokens), whether the
    write guard refuses it (a cut-off answer is refused too), whether the instruction check fails."""
    try:
        result = finish_edit(job, generation, request)
    except OutputTruncatedError:
        return None, True, False
    return edit_distance(job.source.original, result.new_text), not result.guard.ok, result.check.failed


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
