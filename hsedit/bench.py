"""`hsedit bench`: drafting methods side by side on the same tasks, interleaved in one run.

The machine is noisy, so methods take turns on every task (the order rotates) and speed is
reported as ratios from the same run. Every output is checked token for token against plain
decoding: a drafter that changes the output is a bug, not a speedup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hsedit.apply import EditJob, edit_request
from hsedit.edit.files import read_source
from hsedit.engine.engine import NO_DRAFTER, Engine, EngineOptions, GenerationRequest, shared_engine
from hsedit.errors import UsageError
from hsedit.tasks import is_edit, task_lines

DEFAULT_METHODS = (NO_DRAFTER, "ngram", "vllm-ngram")
CHAT_MAX_TOKENS = 256


@dataclass(frozen=True)
class BenchTask:
    name: str
    job: EditJob | None = None  # an edit ...
    chat: str | None = None  # ... or a chat prompt


@dataclass
class MethodTotals:
    method: str
    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    proposer_seconds: float = 0.0
    proposer_steps: int = 0
    runs: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def proposer_ms_per_step(self) -> float | None:
        return 1000 * self.proposer_seconds / self.proposer_steps if self.proposer_steps else None


@dataclass
class BenchReport:
    methods: list[MethodTotals]
    tasks: list[str]
    repeats: int

    @property
    def exact(self) -> bool:
        return not any(m.mismatches for m in self.methods)

    def ratio(self, method: MethodTotals, baseline: str = NO_DRAFTER) -> float | None:
        base = next((m for m in self.methods if m.method == baseline), None)
        if base is None or not base.tokens_per_second:
            return None
        return method.tokens_per_second / base.tokens_per_second

    def as_dict(self) -> dict:
        return {
            "tasks": self.tasks,
            "repeats": self.repeats,
            "exact": self.exact,
            "methods": [
                {
                    "method": m.method,
                    "tokens": m.tokens,
                    "seconds": round(m.seconds, 3),
                    "tokens_per_second": round(m.tokens_per_second, 3),
                    "ratio_to_plain": _round(self.ratio(m)),
                    "tokens_per_step": round(m.tokens_per_step, 3),
                    "acceptance": _round(m.acceptance),
                    "drafted": m.drafted,
                    "accepted": m.accepted,
                    "proposer_ms_per_step": _round(m.proposer_ms_per_step),
                    "mismatches": m.mismatches,
                }
                for m in self.methods
            ],
        }


def load_tasks(path: str | Path) -> list[BenchTask]:
    """Edits ({"path", "instruction"} or {"path", "update"}) and chat prompts ({"prompt"})."""
    path = Path(path)
    tasks = []
    for number, _line, item in task_lines(path):
        if is_edit(item):
            source = read_source(path.parent / item["path"])
            job = EditJob.for_source(source, item["path"], item.get("instruction", ""), item.get("update"))
            what = item.get("instruction") or "merge an update"
            tasks.append(BenchTask(f"{item['path']}: {what}", job=job))
        elif isinstance(item.get("prompt"), str):
            tasks.append(BenchTask(f"chat: {item['prompt'][:40]}", chat=item["prompt"]))
        else:
            raise UsageError(f'{path}:{number}: expected {{"path", "instruction"}}, {{"path", "update"}} or {{"prompt"}}')
    return tasks


def run_bench(
    tasks: Sequence[BenchTask],
    methods: Sequence[str] = DEFAULT_METHODS,
    repeats: int = 1,
    engine_for: Callable[[str], Engine] | None = None,
    on_run: Callable[[str, str, int], None] | None = None,
) -> BenchReport:
    engine_for = engine_for or (lambda method: shared_engine(EngineOptions(drafter=method)))
    methods = [NO_DRAFTER, *(m for m in dict.fromkeys(methods) if m != NO_DRAFTER)]
    engines = {method: engine_for(method) for method in methods}  # start all before timing
    totals = {method: MethodTotals(method) for method in methods}
    outputs: dict[tuple[str, int], list[list[int]]] = {}
    for repeat in range(repeats):
        for t, task in enumerate(tasks):
            shift = (repeat + t) % len(methods)
            for method in methods[shift:] + methods[:shift]:
                if on_run:
                    on_run(method, task.name, repeat)
                engine = engines[method]
                token_ids = _run_once(engine, _request(engine, task), totals[method])
                outputs.setdefault((method, t), []).append(token_ids)
    for (method, t), runs in outputs.items():
        if any(run != outputs[(NO_DRAFTER, t)][0] for run in runs):
            totals[method].mismatches.append(tasks[t].name)
    return BenchReport(list(totals.values()), [t.name for t in tasks], repeats)


def _request(engine: Engine, task: BenchTask) -> GenerationRequest:
    if task.job is not None:
        return edit_request(engine, task.job)
    prompt = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": task.chat}], tokenize=False, add_generation_prompt=True
    )
    return GenerationRequest(prompt, max_tokens=CHAT_MAX_TOKENS)


def _run_once(engine: Engine, request: GenerationRequest, totals: MethodTotals) -> list[int]:
    proposer = engine.proposer
    before = (proposer.propose_seconds, proposer.propose_calls) if proposer else (0.0, 0)
    counts_before = engine.counts.snapshot()
    (generation,) = engine.generate([request])
    stats = generation.stats
    verified = engine.counts.since(counts_before)  # vLLM's scheduler counts, for every method alike
    totals.runs += 1
    totals.tokens += stats.completion_tokens
    totals.seconds += stats.elapsed_s
    totals.steps += len(stats.steps)
    totals.drafted += verified.draft_tokens
    totals.accepted += verified.accepted_tokens
    if proposer:
        totals.proposer_seconds += proposer.propose_seconds - before[0]
        totals.proposer_steps += proposer.propose_calls - before[1]
    return generation.token_ids


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
