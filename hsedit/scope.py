"""Whole file or regions: the requests one edit makes, and how their answers become one new file.

`--scope file` sends the whole file once, as hsedit always did. `--scope regions` parses the
instruction into its intent (`edit/intent.py`), cuts the file at its syntax and picks the regions
the intent touches (`edit/regions.py`), and sends each region as a request of its own, all in one
engine batch; each answer is checked against the intent on its own where the intent allows, a
failing region is asked again (`RETRIES`), and the answers are spliced back into the file. The
spliced file then goes through exactly what a whole-file answer goes through: validation, the
write guard and the instruction check on the whole file, which alone decides whether the edit
succeeded. A region that is not picked is never sent and never changes.

`auto` (the default) takes regions for every Python file whose instruction the intent grammar
reads, and the whole file for the rest (free-form instructions, other languages) when it fits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache

from hsedit.apply import (
    FENCE_STOP,
    LOOP_ADVICE,
    EditJob,
    EditResult,
    EditRunner,
    GeneratedEdit,
    cut_off_advice,
    finish_edit,
    judge,
)
from hsedit.config import AUTO, FILE, REGIONS
from hsedit.edit.check import CheckVerdict, RenameReach, Source, check_intent, rename_reach
from hsedit.edit.extract import extract_file
from hsedit.edit.files import SourceFile
from hsedit.edit.guard import DEFAULT_MAX_DELETION
from hsedit.edit.intent import Delete, FreeForm, Intent, Rename, parse_intent
from hsedit.edit.regions import (
    REGION_TOKENS,
    Region,
    Unit,
    estimated_tokens,
    group,
    line_pieces,
    own_part,
    pick,
    regions_for,
    splice,
    units,
)
from hsedit.edit.validate import CHECKED_SUFFIXES, validate
from hsedit.engine.repetition import REPETITION
from hsedit.engine.requests import StepEvent
from hsedit.engine.stats import RequestStats
from hsedit.errors import ContextTooLongError, HseditError, OutputTruncatedError, UsageError

# A region whose answer fails its check, is cut off or loses its shape is asked again this many
# times: first cut finer where it can be (`finer_regions`), then sampled (all its sampled
# attempts in one round). Six, measured against four (docs/check.md): each finer cut takes an
# attempt, and the sampled ones left after them still make renames right.
RETRIES = 6
RETRY_TEMPERATURE = 0.7
# `auto` keeps a free-form edit whole while the file, twice over, fits the default model's context.
WHOLE_FILE_TOKENS = 3000


def resolve_scope(scope: str, job: EditJob, intent: Intent) -> str:
    """`file` or `regions` for this edit."""
    if scope != AUTO:
        return scope
    if CHECKED_SUFFIXES.get(job.source.path.suffix.lower()) != "python" or not Source(job.source.text).root.children:
        return FILE
    if isinstance(intent, FreeForm) and estimated_tokens(job.source.text) <= WHOLE_FILE_TOKENS:
        return FILE
    return REGIONS if not Source(job.source.text).root.has_error else FILE


@dataclass
class Part:
    """One request of an edit: the whole file, or one region."""

    job: EditJob  # what is sent (for a region: its shown text as the "file")
    region: Region | None = None
    attempts: int = 0
    answered: bool = False  # its latest request has come back
    final: bool = False  # no further attempt: it passed, or asking again cannot help
    new_own: str | None = None  # a region's own lines as answered (None: not usable)
    verdict: CheckVerdict | None = None
    stats: list[RequestStats] = field(default_factory=list)
    problem: str | None = None  # why the last answer is not usable, or failed its check
    truncated_at: int | None = None  # the tokens of an answer cut off (at its budget, or in a loop)
    looped: bool = False  # the answer cut off was stopped in a loop
    generated: GeneratedEdit | None = None  # the latest generation (or the runner's refusal)
    sample: int = 0  # which of a round's sampled copies of its region this is (0: the region itself)

    def as_dict(self) -> dict:
        region = self.region
        last = self.stats[-1] if self.stats else None
        return {
            "lines": [region.start + 1, region.end] if region else None,
            "attempts": self.attempts,
            "check": self.verdict.as_dict() if self.verdict else None,
            "problem": self.problem,
            "prompt_tokens": sum(s.prompt_tokens for s in self.stats),
            "completion_tokens": sum(s.completion_tokens for s in self.stats),
            "tokens_per_step": round(last.tokens_per_step, 3) if last else None,
        }


@dataclass
class EditPlan:
    job: EditJob
    intent: Intent
    scope: str
    parts: list[Part]
    reach: RenameReach | None = None  # what a rename must follow, read on the whole file


def plan_edit(job: EditJob, scope: str = AUTO) -> EditPlan:
    intent = parse_intent(job.instruction, job.update)
    chosen = resolve_scope(scope, job, intent)
    if chosen == FILE:
        return EditPlan(job, intent, FILE, [Part(job)])
    text = job.source.text
    if CHECKED_SUFFIXES.get(job.source.path.suffix.lower()) != "python":
        raise UsageError(f"--scope regions needs a Python file ({job.display_path} is not one)")
    if Source(text).root.has_error:
        raise UsageError(f"{job.display_path} does not parse, so it cannot be cut into regions: use --scope file")
    reach = rename_reach(Source(text), intent.old) if isinstance(intent, Rename) and not intent.scope else None
    return EditPlan(job, intent, REGIONS, [_region_part(job, r) for r in regions_for(text, intent)], reach)


def _region_part(job: EditJob, region: Region) -> Part:
    shown = SourceFile.from_text(job.source.path, region.shown)
    return Part(EditJob.for_source(shown, job.display_path, job.instruction, job.update), region)


def generate_edits(
    runner: EditRunner,
    jobs: Iterable[EditJob],
    *,
    scope: str = AUTO,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    seed: int | None = None,
    max_in_flight: int = 1,
    on_step: Callable[[StepEvent], None] | None = None,
    max_deletion: float = DEFAULT_MAX_DELETION,
    retries: int = RETRIES,
    sampled_retries: bool = True,
) -> Iterator[tuple[int, EditResult | HseditError]]:
    """Each job's result (or the error that stopped it) with its position in `jobs`, as each
    finishes. Every request of every job runs in the runner's batch (`max_in_flight` requests at
    once); regions that must be asked again run in later rounds (`sampled_retries=False`: only
    as their smaller units, never the same question sampled)."""
    plans: dict[int, EditPlan] = {}
    sent: list[tuple[int, Part]] = []  # by request position in the current round
    waiting: list[tuple[int, Part]] = []  # parts to ask again next round

    def settle(index: int) -> Iterator[tuple[int, EditResult | HseditError]]:
        plan = plans[index]
        if all(p.answered and (p.final or p.attempts > retries) for p in plan.parts):
            del plans[index]
            yield index, _finish(plan, max_deletion, max_tokens)

    def first_round() -> Iterator[EditJob]:
        for index, job in enumerate(jobs):
            try:
                plan = plan_edit(job, scope)
            except HseditError as error:
                pending_errors.append((index, error))
                continue
            plans[index] = plan
            if not plan.parts:
                pending_done.append(index)
            for part in plan.parts:
                sent.append((index, part))
                yield part.job

    def round_of(parts: list[tuple[int, Part]]) -> Iterator[EditJob]:
        for index, part in parts:
            sent.append((index, part))
            yield part.job

    copies: dict[int, tuple[Part, list[Part]]] = {}  # id(copy) -> (the part it answers for, all its copies)

    def sampled_copies(parts: list[tuple[int, Part]], round_number: int) -> list[tuple[int, Part]]:
        """Every attempt a repeated part has left, asked at once, each with a seed of its own:
        a batch of them costs little more than one."""
        out = []
        for index, part in parts:
            left = retries + 1 - part.attempts  # >= 1: a part is asked again only with attempts left
            base = (seed or 0) + round_number  # copy k samples as the k-th later round would have
            group = [replace(part, job=replace(part.job, seed=base + k), stats=[], sample=k, answered=False)
                     for k in range(left)]
            for member in group:
                copies[id(member)] = (part, group)
            out += [(index, member) for member in group]
        return out

    def run(round_jobs: Iterable[EditJob], sampled: bool):
        sent.clear()
        for done in runner.generate(
            round_jobs, max_tokens=max_tokens, max_in_flight=max_in_flight, on_step=_keyed(on_step, sent),
            temperature=RETRY_TEMPERATURE if sampled and temperature == 0 else temperature,
            seed=seed,  # a sampled round's jobs are copies, each with its own seed
        ):
            yield from _drain(pending_errors, pending_done, plans, max_deletion, max_tokens)
            index, part = sent[done.index]
            _record(plans[index], part, done)
            if id(part) in copies:
                part, group = copies[id(part)]
                if not all(member.answered for member in group):
                    continue
                _adopt(part, group)
            if not part.final and part.attempts <= retries:
                waiting.append((index, part))
            yield from settle(index)
        yield from _drain(pending_errors, pending_done, plans, max_deletion, max_tokens)

    pending_errors: list[tuple[int, HseditError]] = []
    pending_done: list[int] = []
    yield from run(first_round(), False)
    round_number = 0
    while waiting:
        again = _retry_parts(plans, waiting)
        waiting = []
        round_number += 1
        # A region asked again as its smaller units is a new question: greedy, drafted. The same
        # question asked again has the same greedy answer: sampled (seeded, drafted).
        fresh = [(i, p) for i, p in again if p.generated is None]
        repeated = [(i, p) for i, p in again if p.generated is not None]
        if not sampled_retries:
            for _, part in repeated:
                part.answered, part.final = True, True
            repeated = []
        for group, sampled in ((fresh, False), (sampled_copies(repeated, round_number), True)):
            if group:
                yield from run(round_of(group), sampled)
    for index in list(plans):
        yield index, _finish(plans.pop(index), max_deletion, max_tokens)


def _drain(errors, done, plans, max_deletion, max_tokens):
    while errors:
        yield errors.pop(0)
    while done:
        index = done.pop(0)
        yield index, _finish(plans.pop(index), max_deletion, max_tokens)


def _adopt(part: Part, group: list[Part]) -> None:
    """A repeated part takes the first of its sampled copies that passed (else the last one),
    with every copy's attempt and cost counted."""
    chosen = next((c for c in group if c.final and c.problem is None and c.generated.error is None), group[-1])
    for name in ("answered", "final", "new_own", "verdict", "problem", "truncated_at", "looped", "generated"):
        setattr(part, name, getattr(chosen, name))
    part.attempts += len(group)
    part.stats += [s for c in group for s in c.stats]


def _keyed(on_step, sent):
    """Step events keyed by (job position, region label) for the live view."""
    if on_step is None:
        return None

    def forward(event: StepEvent) -> None:
        index, part = sent[event.key]
        label = part.region.label if part.region else ""
        on_step(replace(event, key=(index, f"{label} (sample {part.sample + 1})" if part.sample else label)))

    return forward


def _retry_parts(plans: dict[int, EditPlan], waiting: list[tuple[int, Part]]) -> list[tuple[int, Part]]:
    """The requests of the next round: a failed region that can be cut finer is asked again as
    the pieces of it the intent needs (each a part of its own from then on, the rest of its lines
    kept as they are); one that cannot, as it is."""
    out = []
    for index, part in waiting:
        plan = plans[index]
        pieces = finer_regions(plan.job.source.text, part.region, plan.intent)
        if pieces:
            position = plan.parts.index(part)
            new_parts = [_region_part(plan.job, piece) for piece in pieces]
            for new in new_parts:
                new.attempts = part.attempts  # a retry: it counts against the region's attempts
            plan.parts[position : position + 1] = new_parts
            out += [(index, p) for p in new_parts]
        else:
            part.answered = False
            out.append((index, part))
    return out


# The budgets a failed region is cut at, coarsest first: its units as the file was cut, then
# pieces of about 15 lines, then single statements (each under the headers it sits in). The
# smaller the text shown, the more often the small model is right (docs/check.md).
RETRY_BUDGETS = (REGION_TOKENS, 150, 0)


def finer_regions(text: str, region: Region, intent: Intent) -> list[Region] | None:
    """The region cut at the first of RETRY_BUDGETS that splits it: the pieces the intent needs,
    each a region of its own; past the finest cut, a rename's lines with uses alone
    (`line_pieces`). None when nothing splits it or the intent needs none of them, or it is a
    deletion's: what goes is the definition whole."""
    if isinstance(intent, Delete):
        return None
    for budget in RETRY_BUDGETS:
        inside = [u for u in _cut_once(text, budget) if region.start <= u.start and u.end <= region.end]
        if len(inside) > 1:
            # Each needed unit alone (budget 0 groups nothing), but a header with its docstring.
            needed = group(text, pick(text, intent, inside), budget=0)
            if [(r.start, r.end) for r in needed] != [(region.start, region.end)]:
                return needed or None
    return line_pieces(text, region, intent)


@lru_cache(maxsize=8)
def _cut_once(text: str, budget: int) -> tuple[Unit, ...]:
    """The file's units at `budget`, cut once (~50 ms for 36 KB): every failing region of a
    round is cut from the same file."""
    return tuple(units(text, budget))


def _record(plan: EditPlan, part: Part, done: GeneratedEdit) -> None:
    """Settle a part with its answer: usable and checked, or why not."""
    part.attempts += 1
    part.answered = True
    part.generated = done
    if done.error is not None or part.region is None:
        # A whole file is judged once, by `finish_edit`; a refusal (too long for the context)
        # does not change by asking again.
        part.final = True
        if done.generation is not None:
            part.stats.append(done.generation.stats)
        return
    generation = done.generation
    part.stats.append(generation.stats)
    if generation.stats.finish_reason in ("length", REPETITION):
        part.truncated_at = generation.stats.completion_tokens
        part.looped = generation.stats.finish_reason == REPETITION
        part.problem = f"the answer for {part.region.label} was cut off at {part.truncated_at} tokens"
        return
    answer = generation.text + (FENCE_STOP if generation.stats.finish_reason == "stop" else "")
    shown = part.job.source.text
    new_shown = extract_file(answer, shown).text
    new_own = own_part(part.region, new_shown)
    if new_own is None:
        part.problem = f"the answer for {part.region.label} does not keep the head it was shown"
        return
    if not _parses_in_place(plan.job, part.region, new_own):
        # Lines moved into or out of their block parse on their own, under their head, but not
        # between their neighbours: spliced, they would fail the whole edit. Asked again instead.
        part.problem = f"the answer for {part.region.label} does not parse where it goes"
        return
    part.truncated_at, part.looped = None, False
    part.new_own = new_own
    part.verdict = (_free_form_verdict(plan, part, new_own) if isinstance(plan.intent, FreeForm)
                    else _region_verdict(plan, part, shown, new_shown, new_own))
    part.problem = f"{part.region.label}: {part.verdict.reason}" if part.verdict.failed else None
    part.final = part.problem is None


def _free_form_verdict(plan: EditPlan, part: Part, new_own: str) -> CheckVerdict:
    """Judged by the names it reads, against the whole file as the other regions' answers so far
    leave it: a helper one region adds may be what another one calls."""
    others = [(p.region, p.new_own) for p in plan.parts if p.region != part.region and p.new_own is not None]
    text = plan.job.source.text
    before, after = splice(text, others), splice(text, [*others, (part.region, new_own)])
    return check_intent(plan.job.source.path, before, after, plan.intent)


def _region_verdict(plan: EditPlan, part: Part, shown: str, new_shown: str, new_own: str) -> CheckVerdict:
    """Judged on the region as it was shown."""
    intent = plan.intent
    if isinstance(intent, Rename) and intent.scope and part.region.indent is not None:
        # A line piece is shown without the function it was picked inside: there, the scoped
        # rename is every use's (else "no such function here" would pass it unchanged).
        intent = replace(intent, scope=None)
    verdict = check_intent(plan.job.source.path, shown, new_shown, intent, reach=plan.reach, whole_file=False)
    if verdict.failed and part.region.head:
        # The head is shown, never spliced: what the model did to it is dropped. Judged as it is
        # spliced (under the head as it was), the region's own lines may be right all the same;
        # a use in the head is its own region's to rename, not this one's.
        head = part.region.head_text
        spliced = check_intent(plan.job.source.path, shown, head + new_own, intent, reach=plan.reach,
                               judged_from=len(head), whole_file=False)
        if spliced.ok:
            return spliced
    return verdict


def _parses_in_place(job: EditJob, region: Region, new_own: str) -> bool:
    """Whether the file still parses, as `hsedit apply` validates it, with the region's lines
    replaced by `new_own` (about 10 ms for the largest held-out file, 36 KB)."""
    text = job.source.text
    return validate(job.source.path, splice(text, [(region, new_own)]), text).ok


def _finish(plan: EditPlan, max_deletion: float, max_tokens: int | None) -> EditResult | HseditError:
    job = plan.job
    try:
        if plan.scope == FILE:
            (part,) = plan.parts
            done = part.generated
            if done.error is not None:
                return done.error
            return finish_edit(job, done.generation, done.request, max_deletion=max_deletion, asked_max_tokens=max_tokens)
        cut_off = [p for p in plan.parts if p.truncated_at is not None]
        if cut_off:
            part = cut_off[0]
            advice = LOOP_ADVICE if part.looped else cut_off_advice(part.job, max_tokens)
            return OutputTruncatedError(
                f"{job.display_path}: the answer for {part.region.label} was cut off at {part.truncated_at} tokens "
                f"after {part.attempts} attempts; {advice}"
            )
        refused = [p for p in plan.parts if p.generated is not None and p.generated.error is not None]
        if refused:
            part = refused[0]
            error = part.generated.error
            if isinstance(error, ContextTooLongError):  # named by its lines: the file itself may be small enough
                detail = str(error).partition(": ")[2]
                return ContextTooLongError(f"{job.display_path} {part.region.label} are too long for the model's "
                                           f"context and cannot be cut smaller: {detail}")
            return error
        answers = [(p.region, p.new_own if p.new_own is not None else p.region.own_text) for p in plan.parts]
        new_text = splice(job.source.text, answers)
        stats = merged_stats([s for p in plan.parts for s in p.stats])
        completion = "".join(p.new_own or "" for p in plan.parts)
        return judge(job, new_text, completion=completion, stats=stats, closed=True, max_deletion=max_deletion,
                     scope=REGIONS, regions=[p.as_dict() for p in plan.parts], intent=plan.intent)
    except HseditError as error:
        return error


def merged_stats(all_stats: list[RequestStats]) -> RequestStats:
    """One edit's stats over its requests: their steps, tokens and drafts together, its time from
    the first request's start to the last one's end."""
    merged = RequestStats()
    if not all_stats:
        merged.started_at = merged.finished_at = time.perf_counter()
        merged.finish_reason = "stop"
        return merged
    merged.prompt_tokens = sum(s.prompt_tokens for s in all_stats)
    merged.steps = [step for s in all_stats for step in s.steps]
    merged.started_at = min(s.started_at for s in all_stats)
    firsts = [s.first_token_at for s in all_stats if s.first_token_at is not None]
    merged.first_token_at = min(firsts) if firsts else None
    ends = [s.finished_at for s in all_stats if s.finished_at is not None]
    merged.finished_at = max(ends) if ends else None
    reasons = {s.finish_reason for s in all_stats}
    merged.finish_reason = "stop" if reasons <= {"stop"} else next(r for r in reasons if r != "stop")
    merged.plain_estimate_s = all_stats[0].plain_estimate_s
    reported = [s.engine_reported for s in all_stats]
    if all(r is not None for r in reported):
        merged.engine_reported = (sum(r[0] for r in reported), sum(r[1] for r in reported))
    return merged


# How many requests one `hsedit apply` runs at once: all its regions, in one batch, up to this.
MAX_IN_FLIGHT = 16


def run_edit(
    runner: EditRunner,
    job: EditJob,
    *,
    scope: str = AUTO,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    seed: int | None = None,
    on_step: Callable[[StepEvent], None] | None = None,
    max_deletion: float = DEFAULT_MAX_DELETION,
    retries: int = RETRIES,
    sampled_retries: bool = True,
) -> EditResult:
    """One edit, its regions in one batch: the result, or the error that stopped it (raised)."""
    ((_, result),) = generate_edits(
        runner, [job], scope=scope, max_tokens=max_tokens, temperature=temperature, seed=seed,
        max_in_flight=MAX_IN_FLIGHT, on_step=on_step, max_deletion=max_deletion, retries=retries,
        sampled_retries=sampled_retries,
    )
    if isinstance(result, HseditError):
        raise result
    return result
