"""One bench run: every engine started first, then for each round, workload and batch size the
methods take turns (the order rotates, so no method always runs on a warm or a cold machine);
then the outputs are judged and the limits priced."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace

from hsedit.apply import edit_request
from hsedit.bench.judge import (
    NOISE_TOP,
    Noise,
    Output,
    judge_answer,
    judge_exactness,
    margin_shifts,
    tolerance_for,
)
from hsedit.bench.methods import (
    DEFAULT_METHODS,
    UnavailableMethod,
    default_max_draft,
    engine_for_method,
    max_draft_of,
    method_name,
    plain_for,
)
from hsedit.bench.report import BenchReport, Cell
from hsedit.bench.workloads import BenchTask, Workload, groups
from hsedit.drafting.chain import HYBRID, NO_DRAFTER, VLLM_BUILTINS
from hsedit.drafting.copy_drafter import priced_max_draft
from hsedit.engine.costs import CostTable
from hsedit.engine.engine import Engine, Generation, GenerationRequest

CHAT_MAX_TOKENS = 192


def run_bench(
    workloads: Sequence[Workload],
    methods: Sequence[str] = DEFAULT_METHODS,
    batch_sizes: Sequence[int] = (1,),
    repeats: int = 1,
    engine_for: Callable[[str], Engine] | None = None,
    on_run: Callable[[str, str, int, int], None] | None = None,
    temperature: float = 0.0,
    noise: bool = True,
) -> BenchReport:
    """Above temperature 0 every request samples with a seed of its own (its task's position in
    the workload), the same for every method: plain decoding's answer is the reference. Greedy
    below float32, `noise` measures the dtype's own noise after the timed rounds (`measure_noise`)."""
    methods = _with_plain(methods)
    engines, skipped = start_engines(methods, engine_for or engine_for_method)
    machine_table = fastest_costs(engines.values())
    cells = {
        (w.name, b, m): Cell(w.name, b, m, w.scope, skipped=skipped.get(m))
        for w in workloads for b in batch_sizes for m in methods
    }
    outputs: dict[tuple[str, int, str], list[Output]] = {key: [] for key in cells}
    for repeat, workload, batch_size, method in schedule(workloads, batch_sizes, [m for m in methods if m in engines],
                                                         repeats):
        if on_run:
            on_run(method, workload.name, batch_size, repeat)
        key = (workload.name, batch_size, method)
        cell = cells[key]
        tokens, seconds = cell.tokens, cell.seconds
        outputs[key] += run_workload(engines[method], workload, batch_size, cell, machine_table,
                                     max_draft_of(method), temperature)
        cell.round_tokens.append(cell.tokens - tokens)
        cell.round_seconds.append(cell.seconds - seconds)
    answers = judge_plain_answers(workloads, outputs, batch_sizes[0], methods[0], repeats)
    measured: dict[str, Noise] = {}
    for method, engine in engines.items():  # each plain engine below float32 (eager, compiled) adds to its dtype's
        dtype = engine.options.resolved_dtype
        if noise and temperature == 0 and method_name(method) == NO_DRAFTER and dtype != "float32":
            measure_noise(engine, workloads, batch_sizes, measured.setdefault(dtype, Noise()))
    tolerance = {e.options.resolved_dtype: tolerance_for(e.options.resolved_dtype, measured.get(e.options.resolved_dtype))
                 for e in engines.values()}
    for cell in cells.values():
        if cell.method in engines:
            judge_outputs(cell, outputs, engines, repeats, None if temperature > 0 else tolerance)
    price_machine_limit(cells.values(), engines)
    distances, refused, wrong = answers
    return BenchReport(
        cells=list(cells.values()),
        workloads={w.name: [t.name for t in w.tasks] for w in workloads},
        edit_distance={w: (sum(d) / len(d) if d else None) for w, d in distances.items()},
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
        dspark_targets={method: e.drafter_target for method, e in engines.items() if e.drafter_target is not None},
        tolerance=tolerance,
        noise=measured,
        temperature=temperature,
    )


def _with_plain(methods: Sequence[str]) -> list[str]:
    """Plain decoding first, and a plain decoding for every dtype in use (its methods' yardstick)."""
    methods = list(dict.fromkeys([NO_DRAFTER, *methods]))
    return list(dict.fromkeys([*(plain_for(m) for m in methods), *methods]))


def start_engines(methods: Sequence[str], engine_for: Callable[[str], Engine]) -> tuple[dict[str, Engine], dict[str, str]]:
    """Every engine, before anything is timed (vLLM's own drafters last: they start children)."""
    engines: dict[str, Engine] = {}
    skipped: dict[str, str] = {}
    for method in sorted(methods, key=lambda m: method_name(m) in VLLM_BUILTINS):
        try:
            engines[method] = engine_for(method)
        except UnavailableMethod as why:
            skipped[method] = str(why)
    return engines, skipped


def fastest_costs(engines: Iterable[Engine]) -> CostTable | None:
    """One cost table from every engine's, the fastest measurement of each size kept: noise only
    ever adds time, and a table profiled while the machine was busy would otherwise put the limit
    above what the runs reach."""
    samples: dict[int, float] = {}
    for table in (e.cost_table for e in engines if e.cost_table is not None):
        for n, t in zip(table.tokens, table.seconds):
            samples[n] = min(t, samples.get(n, t))
    return CostTable.from_samples(samples) if samples else None


def schedule(workloads: Sequence[Workload], batch_sizes: Sequence[int], methods: Sequence[str],
             repeats: int) -> Iterator[tuple[int, Workload, int, str]]:
    """(round, workload, batch size, method) in run order: the methods rotate from cell to cell."""
    for repeat in range(repeats):
        for w_index, workload in enumerate(workloads):
            for b_index, batch_size in enumerate(batch_sizes):
                shift = (repeat + w_index + b_index) % len(methods)
                for method in methods[shift:] + methods[:shift]:
                    yield repeat, workload, batch_size, method


def run_workload(engine: Engine, workload: Workload, batch_size: int, cell: Cell, table: CostTable | None,
                 max_draft: int | None, temperature: float = 0.0) -> list[Output]:
    """The workload once at this batch size, its figures added into `cell`."""
    seeds = {id(task): i for i, task in enumerate(workload.tasks)}
    cell.runs += 1
    cell.file_tokens += sum(engine.count_tokens(t.file_tokens_of.source.text)
                            for t in workload.tasks if t.file_tokens_of is not None)
    outputs = []
    for group in groups(workload.tasks, batch_size):
        sampling = [(temperature, seeds[id(task)]) for task in group]
        requests, results = run_group(engine, group, cell, table, max_draft, sampling)
        outputs += [Output(task, request, result) for task, request, result in zip(group, requests, results)]
    return outputs


def run_group(
    engine: Engine, group: list[BenchTask], cell: Cell, table: CostTable | None = None, max_draft: int | None = None,
    sampling: Sequence[tuple[float, int]] | None = None,  # [group] (temperature, seed) per task
) -> tuple[list[GenerationRequest], list[Generation]]:
    proposer = engine.proposer
    before = proposer.timings() if proposer else None
    requests = [_request(engine, task) for task in group]
    if sampling is not None:
        requests = [replace(r, temperature=t, seed=s) if t > 0 else r for r, (t, s) in zip(requests, sampling)]
    started = time.perf_counter()
    results = engine.generate(requests)
    cell.seconds += time.perf_counter() - started
    first = [r.stats.ttft_s for r in results if r.stats.ttft_s is not None]
    cell.prefill_seconds += max(first) if first else 0.0  # until every request of the group is running
    if table is not None:
        # From the group's first token on (later prompts' prefill overlaps decoding: counting it
        # again would put the limit above what a run can do).
        longest = max_draft if max_draft is not None else default_max_draft(cell.method)
        if method_name(cell.method) == HYBRID:  # what the planner verifies in a batch this size
            longest = priced_max_draft(longest, len(group))
        chain = 1 + longest
        decoding = all_accepted_limit(table, [r.stats.completion_tokens for r in results], chain)
        cell.limit_seconds += (min(first) if first else 0.0) + decoding
    for result in results:
        _count(cell, result)
    if proposer:
        after = proposer.timings()
        cell.proposer_seconds += after.seconds - before.seconds
        cell.proposer_steps += after.calls - before.calls
        cell.model_drafted += after.model_drafted - before.model_drafted
        cell.model_skipped += after.model_skipped - before.model_skipped
    return requests, results


def _count(cell: Cell, result: Generation) -> None:
    stats = result.stats
    cell.tokens += stats.completion_tokens
    cell.processed_tokens += stats.prompt_tokens - stats.cached_prompt_tokens + stats.completion_tokens
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


def _request(engine: Engine, task: BenchTask) -> GenerationRequest:
    if task.job is not None:
        return edit_request(engine, task.job)
    return GenerationRequest(engine.chat_prompt(task.chat), max_tokens=CHAT_MAX_TOKENS)


def judge_plain_answers(workloads: Sequence[Workload], outputs: dict[tuple[str, int, str], list[Output]],
                        batch_size: int, plain: str, repeats: int):
    """Plain decoding's answers (first batch size, first round) as `hsedit apply` takes them: per
    workload the edit distances, and the edits the write guard refuses or the check fails."""
    distances: dict[str, list[float]] = {w.name: [] for w in workloads}
    refused: dict[str, list[str]] = {w.name: [] for w in workloads}
    wrong: dict[str, list[str]] = {w.name: [] for w in workloads}
    for workload in workloads:
        runs = outputs[(workload.name, batch_size, plain)]
        for output in runs[: len(runs) // repeats]:
            if output.task.job is None:
                continue
            verdict = judge_answer(output)
            if verdict.distance is not None:
                distances[workload.name].append(verdict.distance)
            for names, flagged in ((refused, verdict.guard_refuses), (wrong, verdict.check_fails)):
                if flagged and output.task.name not in names[workload.name]:
                    names[workload.name].append(output.task.name)
    return distances, refused, wrong


def measure_noise(plain: Engine, workloads: Sequence[Workload], batch_sizes: Sequence[int],
                  noise: Noise | None = None) -> Noise:
    """The dtype's own noise, untimed after the timed rounds: plain decoding runs every workload
    once more at every batch size keeping each step's log-probabilities, and each answer is
    scored again by one prefill (`judge.Noise`), added into `noise` (default: a new one)."""
    noise = Noise() if noise is None else noise
    bound = tolerance_for(plain.options.resolved_dtype)
    for workload in workloads:
        for batch_size in batch_sizes:
            for group in groups(workload.tasks, batch_size):
                requests = [replace(_request(plain, task), logprobs=NOISE_TOP) for task in group]
                for request, result in zip(requests, plain.generate(requests), strict=True):
                    scored = plain.answer_logprobs(plain.token_ids(request.prompt), result.token_ids, NOISE_TOP)
                    noise.add(margin_shifts(result.token_ids, result.logprobs, scored), bound)
    return noise


def judge_outputs(cell: Cell, outputs: dict[tuple[str, int, str], list[Output]], engines: dict[str, Engine],
                  repeats: int, tolerance: dict[str, float] | None) -> None:
    """The cell's output digest (first round) and its exactness against plain decoding, within
    its dtype's `tolerance` (None: sampled outputs, no tolerance applies)."""
    mine = outputs[(cell.workload, cell.batch_size, cell.method)]
    first_round = [o.generation.token_ids for o in mine[: len(mine) // repeats]]
    cell.output_sha256 = hashlib.sha256(json.dumps(first_round).encode()).hexdigest()
    plain_method = plain_for(cell.method)
    plain = engines[plain_method]
    reference = outputs[(cell.workload, cell.batch_size, plain_method)]  # the same groups, in the same order
    judge_exactness(cell, mine, reference, plain, None if tolerance is None else tolerance[plain.options.resolved_dtype])


def price_machine_limit(cells: Iterable[Cell], engines: dict[str, Engine]) -> None:
    """Each cell's target work (prompt + answer tokens) at the machine's measured peak."""
    peaks: dict[str, float] = {}
    for cell in cells:
        engine = engines.get(cell.method)
        flops = engine.flops_per_token if engine is not None else None
        if not flops or not cell.processed_tokens:
            continue
        dtype = engine.options.resolved_dtype
        peak = peaks.setdefault(dtype, peak_flops(dtype))
        cell.machine_seconds = flops * cell.processed_tokens / peak


def peak_flops(dtype: str, size: int = 1024, repeats: int = 5) -> float:
    """The machine's measured peak: FLOP/s of the best of a few square matmuls in `dtype` on the
    device the engine uses, so "of machine" means the same on every machine."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    kind = getattr(torch, dtype)
    a = torch.randn(size, size, device=device).to(kind)
    b = torch.randn(size, size, device=device).to(kind)
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        (a @ b).sum().item()
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best
