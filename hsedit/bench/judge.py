"""Judging the bench's outputs: each method's against plain decoding of the same dtype and batch
(token-identical, greedy within the dtype's tolerance, or changed), and plain decoding's answers
as `hsedit apply` takes them (edit distance, the write guard, the instruction check)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hsedit.apply import EditJob, finish_edit
from hsedit.bench.report import Cell
from hsedit.bench.workloads import BenchTask
from hsedit.edit.diff import edit_distance
from hsedit.engine.engine import (
    GREEDY_TOLERANCE,
    Engine,
    Generation,
    GenerationRequest,
    within_greedy_tolerance,
)
from hsedit.errors import OutputTruncatedError


@dataclass
class Output:
    """One request of one run: the task, what the engine was asked, what it wrote."""

    task: BenchTask
    request: GenerationRequest
    generation: Generation


def judge_exactness(cell: Cell, outputs: Sequence[Output], plain_outputs: Sequence[Output], plain: Engine,
                    tolerance: float | None) -> None:
    """Fill the cell's exactness from its outputs and plain decoding's at the same positions (the
    same groups in the same order). An output that differs is scored by the plain engine in one
    prefill: within `tolerance` of the top choice at every token it is greedy decoding through a
    near tie; else the drafter changed the answer (`mismatches`). A sampled output (`tolerance`
    None) that differs from plain decoding's, same seed, is listed in `sampled_differs`: its
    tokens are exact draws from the logits of the step that computed them, and the dtype's noise
    between a verification step and a one-token step moves where a draw falls; no tolerance
    is measured for it (the engine tests hold sampled drafting to identity)."""
    for mine, theirs in zip(outputs, plain_outputs, strict=True):
        cell.outputs += 1
        if mine.generation.token_ids == theirs.generation.token_ids:
            cell.identical += 1
            continue
        if tolerance is None:
            if mine.task.name not in cell.sampled_differs:
                cell.sampled_differs.append(mine.task.name)
            continue
        prompt_ids = plain.token_ids(mine.request.prompt)
        gaps = plain.greedy_gaps(prompt_ids, mine.generation.token_ids)
        worst = max(gaps, default=0.0)
        cell.worst_gap = max(cell.worst_gap, worst)
        # Plain decoding's own answer, scored the same way: how far the scoring prefill itself
        # stands from decoding on this task (the dtype's noise there, whatever the drafter).
        own = max(plain.greedy_gaps(prompt_ids, theirs.generation.token_ids), default=0.0)
        cell.plain_worst_gap = max(cell.plain_worst_gap, own)
        names = cell.near_ties if within_greedy_tolerance(worst, tolerance) else cell.mismatches
        if mine.task.name not in names:
            names.append(mine.task.name)


# Log-probabilities kept per position to measure the noise: the emitted token's margin to each
# runner-up both computations list.
NOISE_TOP = 3


@dataclass
class Noise:
    """How far the dtype moves a choice on its own: plain decoding's answers, each position
    computed by the step that wrote it and again by one prefill of prompt + answer; per position
    the largest shift of the margin between the emitted token and a runner-up both list."""

    positions: int = 0
    largest_shift: float = 0.0  # nats
    over_bound: int = 0  # positions past the dtype's rounding bound

    def add(self, shifts: Sequence[float], bound: float) -> None:
        self.positions += len(shifts)
        self.largest_shift = max([self.largest_shift, *shifts])
        self.over_bound += sum(not within_greedy_tolerance(s, bound) for s in shifts)


def margin_shifts(answer_ids: Sequence[int], stepped: Sequence[dict[int, float]],
                  scored: Sequence[dict[int, float]]) -> list[float]:
    """Per answer position: the largest |shift| of the margin between the emitted token and any
    other token listed by both `stepped` (the step's log-probabilities) and `scored` (the
    prefill's); 0.0 where they share no runner-up."""
    shifts = []
    for token, step, prefill in zip(answer_ids, stepped, scored, strict=True):
        shifts.append(max((abs((step[token] - step[other]) - (prefill[token] - prefill[other]))
                           for other in step.keys() & prefill.keys() if other != token), default=0.0))
    return shifts


def tolerance_for(dtype: str, noise: Noise | None = None) -> float:
    """How far below the top choice a token may lie and still be greedy decoding: the dtype's
    rounding bound (`GREEDY_TOLERANCE`), or the noise plain decoding itself shows in this run
    where that is larger (a verification step and a one-token step round no more alike than a
    one-token step and a prefill do)."""
    bound = GREEDY_TOLERANCE.get(dtype, GREEDY_TOLERANCE["bfloat16"])
    return max(bound, noise.largest_shift) if noise is not None else bound


@dataclass
class AnswerVerdict:
    distance: float | None  # edit distance between the file and the answer (None: cut off)
    guard_refuses: bool
    check_fails: bool


def judge_answer(output: Output) -> AnswerVerdict:
    """An edit's answer as `hsedit apply` takes it (`finish_edit`); a cut-off answer is refused."""
    job: EditJob = output.task.job
    try:
        result = finish_edit(job, output.generation, output.request)
    except OutputTruncatedError:
        return AnswerVerdict(None, True, False)
    return AnswerVerdict(edit_distance(job.source.original, result.new_text), not result.guard.ok, result.check.failed)
