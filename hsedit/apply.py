"""One edit, end to end: read, prompt, stream through the engine, extract, validate, diff, write.

Knows no terminal: progress goes to an `on_step` callback, problems are `HseditError`s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hsedit.edit.check import CheckVerdict, check_intent
from hsedit.edit.diff import unified_diff
from hsedit.edit.extract import extract_file
from hsedit.edit.files import SourceFile, check_writable, read_source, write_if_unchanged
from hsedit.edit.guard import DEFAULT_MAX_DELETION, GuardVerdict, check_answer
from hsedit.edit.intent import Intent, answer_growth_bound, parse_intent
from hsedit.edit.predict import answer_reference
from hsedit.edit.prompt import CLOSING_FENCE, ApplyPrompt
from hsedit.edit.validate import Validation, validate
from hsedit.engine.repetition import REPETITION
from hsedit.engine.requests import Generation, GenerationRequest, StepEvent
from hsedit.engine.stats import RequestStats
from hsedit.errors import (
    DestructiveAnswerError,
    HseditError,
    InstructionCheckError,
    OutputTruncatedError,
    UsageError,
    ValidationError,
)

if TYPE_CHECKING:  # the engine is imported only where it runs: a server's client has no vLLM
    from hsedit.engine.engine import Engine
    from hsedit.engine.provision import DrafterTarget

# Room for the answer beyond a copy of the file: edits may add lines.
ANSWER_SLACK_TOKENS = 256
ANSWER_GROWTH = 1.5
# Where the intent bounds how much a right answer can grow (`answer_growth_bound`), the answer's
# room is the file's tokens, that growth and this much for the closing fence and line ends: an
# answer that runs past it cannot be right, so a runaway stops there.
BOUNDED_SLACK_TOKENS = 32


@dataclass
class EditJob:
    source: SourceFile
    display_path: str  # as the diff and the prompt name it
    instruction: str
    prompt: ApplyPrompt
    update: str | None = None  # a lazy-snippet merge's snippet (then `instruction` may be empty)
    # fixes this job's sampling in place of the batch's seed: copies of one question asked at
    # once need seeds of their own
    seed: int | None = None

    def seed_in(self, batch_seed: int | None) -> int | None:
        """The seed this job samples with in a batch given `batch_seed`."""
        return batch_seed if self.seed is None else self.seed

    @classmethod
    def for_source(cls, source: SourceFile, display_path: str, instruction: str, update: str | None = None) -> EditJob:
        prompt = ApplyPrompt.build(display_path, source.text, instruction, update)
        return cls(source, display_path, instruction, prompt, update)


@dataclass
class EditResult:
    job: EditJob
    completion: str  # the model's raw answer after the prompt's opening fence
    new_text: str  # with the original's line ends
    diff: str
    validation: Validation
    guard: GuardVerdict
    check: CheckVerdict  # does the answer do what the instruction asks (ok None: not checked)
    stats: RequestStats
    closed: bool
    scope: str = "file"  # the whole file in one request, or "regions" (hsedit/scope.py)
    regions: list[dict] = field(default_factory=list)  # with regions: each one's lines, attempts, check

    @property
    def changed(self) -> bool:
        return self.new_text != self.job.source.original

    def refusal(self) -> HseditError | None:
        """Why this answer must not be written (without --force), or None. The write policy
        of apply, batch and the hooks alike."""
        name = self.job.display_path
        if not self.guard.ok:
            return DestructiveAnswerError(f"{name}: {self.guard.reason}; nothing written (--force writes anyway)")
        if not self.validation.ok:
            return ValidationError(
                f"the rewritten {name} does not parse ({self.validation.message}); nothing written (--force writes anyway)"
            )
        if self.check.failed:
            return InstructionCheckError(
                f"{name}: the answer does not do what was asked: {self.check.reason}; nothing written (--force writes anyway)"
            )
        return None

    def as_dict(self) -> dict:
        return {
            "path": self.job.display_path,
            "changed": self.changed,
            "new_text": self.new_text,
            "diff": self.diff,
            "validation": {
                "language": self.validation.language,
                "ok": self.validation.ok,
                "message": self.validation.message,
            },
            "guard": self.guard.as_dict(),
            "check": self.check.as_dict(),
            "stats": self.stats.as_dict(),
            "scope": self.scope,
            "regions": self.regions,
        }


def check_write_options(write: bool, force: bool) -> None:
    """`force` overrides the write policy, so it means nothing without `write`: say so up front."""
    if force and not write:
        raise UsageError("--force only makes sense with --write")


def load_job(path: str | Path, instruction: str, *, write: bool = False) -> EditJob:
    """Read the file and check the request before any model runs (with `write`: that the file
    can be replaced too, so a read-only file is refused up front, not after the edit)."""
    if not instruction or not instruction.strip():
        raise UsageError("the instruction is empty: say what to change")
    source = read_source(path)
    if write:
        check_writable(source)
    return EditJob.for_source(source, _display_path(Path(path)), instruction)


FENCE_STOP = "\n" + CLOSING_FENCE


def edit_request(
    engine: Engine,
    job: EditJob,
    *,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    seed: int | None = None,
) -> GenerationRequest:
    """The generation request for an edit; refuses files that do not fit the context."""
    prompt_ids = engine.tokenizer.encode(job.prompt.render(engine.tokenizer))
    file_tokens = len(engine.tokenizer.encode(job.source.text))
    # the answer repeats the file, and a little room beyond it keeps a near-full context useful
    room = engine.answer_room(prompt_ids, file_tokens + 16, f"{job.display_path} is too long for the model's context")
    intent = parse_intent(job.instruction, job.update)
    budget = max_tokens or answer_budget(intent, job.source.text, file_tokens)
    # The answer's reference (a Predicted Output): the copy drafter trusts its copies as an
    # edit's from the first step, where general text's would be cut short.
    prediction = engine.tokenizer.encode(answer_reference(intent, job.source.text))
    return GenerationRequest(prompt_ids, max_tokens=min(budget, room), temperature=temperature, seed=seed,
                             stop=[FENCE_STOP], prediction=prediction, stop_repeating=True)


def answer_budget(intent: Intent, text: str, file_tokens: int) -> int:
    """The most tokens an answer to `intent` on `text` (of `file_tokens` tokens) is given."""
    growth = answer_growth_bound(intent, text)
    if growth is None:
        return int(file_tokens * ANSWER_GROWTH) + ANSWER_SLACK_TOKENS
    return file_tokens + growth + BOUNDED_SLACK_TOKENS


LOOP_ADVICE = "it kept repeating a block of lines the file does not repeat, and no right answer does that"


def cut_off_advice(job: EditJob, asked_max_tokens: int | None) -> str:
    """What to say of a cut-off answer: where its room was the one its intent leaves (no
    --max-tokens given), it ran past any right answer; else more room may help."""
    bounded = answer_growth_bound(parse_intent(job.instruction, job.update), job.source.text) is not None
    if bounded and asked_max_tokens is None:
        return "a right answer to this instruction is shorter, so it ran away (--max-tokens allows more)"
    return "raise --max-tokens"


@dataclass
class GeneratedEdit:
    """A job's finished generation, or why it never ran (a file too long for the context)."""

    index: int  # the job's position among those given to `EditRunner.generate`
    request: GenerationRequest | None  # what ran: its max_tokens explains a cut-off answer
    generation: Generation | None
    error: HseditError | None = None


class EditRunner(Protocol):
    """Turns edit jobs into generations, streaming each step to `on_step`: the embedded engine
    (`EmbeddedRunner`) or an `hsedit serve` server (`hsedit.client.ServerRunner`). Everything
    before (reading, prompting) and after (extracting, checking, writing) is the same code."""

    description: str  # for the "engine ready" line
    dspark_target: DrafterTarget | None  # where a DSpark drafter runs: was it trained for this target?

    def generate(
        self,
        jobs: Iterable[EditJob],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        seed: int | None = None,
        max_in_flight: int = 1,
        on_step: Callable[[StepEvent], None] | None = None,
    ) -> Iterator[GeneratedEdit]: ...


class EmbeddedRunner:
    """Edits on an engine in this process; `jobs` is read only as the engine has room."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.description = f"drafter: {engine.options.drafter}"
        self.dspark_target = engine.drafter_target

    def generate(
        self,
        jobs: Iterable[EditJob],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        seed: int | None = None,
        max_in_flight: int = 1,
        on_step: Callable[[StepEvent], None] | None = None,
    ) -> Iterator[GeneratedEdit]:
        started: list[tuple[int, GenerationRequest]] = []  # by stream position
        refused: list[GeneratedEdit] = []

        def requests() -> Iterator[GenerationRequest]:
            for index, job in enumerate(jobs):
                try:
                    request = edit_request(self.engine, job, max_tokens=max_tokens, temperature=temperature,
                                           seed=job.seed_in(seed))
                except HseditError as error:
                    refused.append(GeneratedEdit(index, None, None, error))
                    continue
                started.append((index, request))
                yield request

        def keyed(event: StepEvent) -> None:  # events carry the job's position, as a server's do
            on_step(replace(event, key=started[event.key][0]))

        finished = self.engine.generate_each(
            requests(), max_in_flight=max_in_flight, on_step=keyed if on_step is not None else None
        )
        for position, generation in finished:
            yield from _drain(refused)
            index, request = started[position]
            yield GeneratedEdit(index, request, generation)
        yield from _drain(refused)


def _drain(items: list[GeneratedEdit]) -> Iterator[GeneratedEdit]:
    while items:
        yield items.pop(0)


def finish_edit(
    job: EditJob, generation: Generation, request: GenerationRequest, *, max_deletion: float = DEFAULT_MAX_DELETION,
    asked_max_tokens: int | None = None,
) -> EditResult:
    """Extract, validate and diff a finished generation; refuse one cut off by max_tokens."""
    if generation.stats.finish_reason == "length":
        raise OutputTruncatedError(
            f"the answer was cut off at {request.max_tokens} tokens before the file was complete "
            f"(the file has {len(job.source.text.splitlines())} lines); {cut_off_advice(job, asked_max_tokens)}"
        )
    if generation.stats.finish_reason == REPETITION:
        raise OutputTruncatedError(f"the answer was stopped after {generation.stats.completion_tokens} tokens: "
                                   f"{LOOP_ADVICE}")
    # Generation stops on the closing fence and leaves it out; put it back for the extractor.
    answer = generation.text + (FENCE_STOP if generation.stats.finish_reason == "stop" else "")
    extracted = extract_file(answer, job.source.text)
    return judge(job, extracted.text, completion=answer, stats=generation.stats, closed=extracted.closed,
                 max_deletion=max_deletion)


def judge(
    job: EditJob,
    new_text: str,
    *,
    completion: str,
    stats: RequestStats,
    closed: bool,
    max_deletion: float = DEFAULT_MAX_DELETION,
    scope: str = "file",
    regions: list[dict] | None = None,
    intent: Intent | None = None,
) -> EditResult:
    """The new text (LF line ends, the whole file) validated, guarded, checked and diffed: what
    every answer goes through, a whole file's or one spliced from regions."""
    intent = intent if intent is not None else parse_intent(job.instruction, job.update)
    restored = job.source.restore(new_text)
    return EditResult(
        job=job,
        completion=completion,
        new_text=restored,
        diff=unified_diff(job.source.original, restored, job.display_path),
        validation=validate(job.source.path, new_text, job.source.text),
        guard=check_answer(job.source.text, new_text, job.instruction, max_deletion=max_deletion),
        check=check_intent(job.source.path, job.source.text, new_text, intent),
        stats=stats,
        closed=closed,
        scope=scope,
        regions=regions or [],
    )


def write_result(result: EditResult, *, force: bool = False) -> bool:
    """Write the new text over the file unless the answer is refused (`force` overrides) or the
    file changed since it was read (never overridden). True if the file changed."""
    refusal = result.refusal()
    if refusal is not None and not force:
        raise refusal
    if not result.changed:
        return False
    write_if_unchanged(result.job.source, result.new_text)
    return True


def settle(result: EditResult, *, write: bool, force: bool = False) -> bool:
    """What `hsedit apply` does with a finished edit (the diff already shown): with `write`,
    write it under the write policy; without, still refuse an answer the guard refuses or the
    instruction check fails, so a script that pipes the diff on never takes a destructive or
    wrong answer for a good one. True if the file was replaced."""
    if write:
        return write_result(result, force=force)
    refusal = result.refusal()
    if isinstance(refusal, (DestructiveAnswerError, InstructionCheckError)):
        raise refusal
    return False


def _display_path(path: Path) -> str:
    """Relative to the working directory when inside it, so `git apply` finds the file."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix().lstrip("/")
