"""How well a model edits: held-out examples through the real engine, scored per edit kind.

Per kind: exact-match rate (the extracted file equals the target), the share of the
target's unchanged lines that the output reproduces exactly, parse rate, mean similarity, the
cut-off rate (answers that ran to max_tokens, as a model that loops on a file does), the
unchanged-answer rate (the file returned as it was where the instruction changes it), and the
instruction check on the real answers (hsedit/edit/check.py): passed, failed, unchecked; passed
but not exact (each to be read: a right answer laid out differently, or a false accept) and
exact but failed (false rejects, which must be 0).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hsedit.apply import EditJob, edit_request, finish_edit
from hsedit.edit.check import check_edit, same_rename
from hsedit.edit.extract import extract_file
from hsedit.edit.files import SourceFile
from hsedit.edit.intent import Rename, parse_intent
from hsedit.edit.validate import validate
from hsedit.engine.engine import Engine
from hsedit.engine.repetition import REPETITION
from hsedit.errors import OutputTruncatedError
from hsedit.train.finetune.dataset import Example


@dataclass
class Score:
    exact: bool
    unchanged_kept: float  # share of the target's unchanged lines reproduced exactly
    unchanged_total: int
    parses: bool
    similarity: float
    cut_off: bool = False  # the answer ran to max_tokens before the file was complete
    check: bool | None = None  # the instruction check's verdict on this answer (None: unchecked)
    # The file came back as it was although the instruction changes it: a model that learnt
    # to copy when unsure (what a share of no-change training data may teach).
    answered_unchanged: bool = False

    @property
    def passed_not_exact(self) -> bool:
        return self.check is True and not self.exact

    @property
    def false_reject(self) -> bool:
        return self.check is False and self.exact


@dataclass
class KindReport:
    kind: str
    scores: list[Score] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.scores)

    def mean(self, attribute: str) -> float:
        return sum(float(getattr(s, attribute)) for s in self.scores) / self.n if self.n else 0.0

    @property
    def unchanged_kept(self) -> float:
        total = sum(s.unchanged_total for s in self.scores)
        kept = sum(s.unchanged_kept * s.unchanged_total for s in self.scores)
        return kept / total if total else 1.0

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "n": self.n,
            "exact": round(self.mean("exact"), 3),
            "unchanged_lines_kept": round(self.unchanged_kept, 3),
            "parses": round(self.mean("parses"), 3),
            "similarity": round(self.mean("similarity"), 3),
            "cut_off": round(self.mean("cut_off"), 3),
            "answered_unchanged": round(self.mean("answered_unchanged"), 3),
            "check_passed": sum(s.check is True for s in self.scores),
            "check_failed": sum(s.check is False for s in self.scores),
            "unchecked": sum(s.check is None for s in self.scores),
            "passed_not_exact": sum(s.passed_not_exact for s in self.scores),
            "false_rejects": sum(s.false_reject for s in self.scores),
        }


def score(example: Example, output: str, cut_off: bool = False) -> Score:
    target = example.after.splitlines(keepends=True)
    before = example.before.splitlines(keepends=True)
    unchanged = set()
    for tag, _a0, _a1, b0, b1 in difflib.SequenceMatcher(a=before, b=target, autojunk=False).get_opcodes():
        if tag == "equal":
            unchanged.update(range(b0, b1))
    produced = output.splitlines(keepends=True)
    kept = set()
    for block in difflib.SequenceMatcher(a=target, b=produced, autojunk=False).get_matching_blocks():
        kept.update(i for i in range(block.a, block.a + block.size) if i in unchanged)
    path = example.path if example.path.endswith(".py") else example.path + ".py"
    parses = validate(path, output, example.before).ok  # as `hsedit apply` validates
    return Score(
        check=check_edit(path, example.before, output, example.instruction, example.update,
                         whole_file=example.scope == "file").ok,
        exact=output == example.after,
        unchanged_kept=len(kept) / len(unchanged) if unchanged else 1.0,
        unchanged_total=len(unchanged),
        parses=parses,
        similarity=difflib.SequenceMatcher(a=example.after, b=output, autojunk=False).ratio(),
        cut_off=cut_off,
        answered_unchanged=output == example.before != example.after,
    )


def evaluate(engine: Engine, examples: Sequence[Example], batch_size: int = 8) -> list[KindReport]:
    """Greedy outputs for every example (concurrently, `batch_size` at a time), scored by kind.

    Each example goes through the same request and extraction code as `hsedit apply`.
    """
    reports: dict[str, KindReport] = {}
    for start in range(0, len(examples), batch_size):
        batch = examples[start : start + batch_size]
        jobs = [
            EditJob.for_source(SourceFile.from_text(e.path, e.before), e.path, e.instruction, e.update)
            for e in batch
        ]
        requests = [edit_request(engine, job) for job in jobs]
        for example, job, request, generation in zip(batch, jobs, requests, engine.generate(requests)):
            try:
                output = finish_edit(job, generation, request).new_text
            except OutputTruncatedError:  # scored as it stands: a cut-off file is simply wrong
                output = extract_file(generation.text, example.before).text
            cut_off = generation.stats.finish_reason in ("length", REPETITION)
            report = reports.setdefault(example.kind, KindReport(example.kind))
            report.scores.append(score(example, output, cut_off))
    return sorted(reports.values(), key=lambda r: r.kind)


def overall(reports: Sequence[KindReport]) -> dict:
    merged = KindReport("all", [s for r in reports for s in r.scores])
    return merged.as_dict()


@dataclass
class EditOutcome:
    """One held-out edit run end to end as `hsedit apply` runs it (the cut, the regions, their
    checks and retries, the splice, the whole-file check)."""

    path: str
    lines: int
    exact: bool
    status: str  # "ok" (would be written), "refused: <exit code>" (nothing written)
    check: bool | None
    seconds: float
    requests: int  # regions sent, retries included (1 for a whole file)
    completion_tokens: int
    file_tokens: int
    # Every region settled at its first attempt: then the answer is the one retries=0 gives too
    # (greedy), so one run tells what the retries bought.
    first_try: bool = True
    # Exact, or a rename that differs from the expected one only in which mentions of the name in
    # docstrings, strings and comments it renamed (`check.same_rename`).
    right: bool = False

    @property
    def wrong_success(self) -> bool:
        """Reported as a success (written without --force) and not a right answer."""
        return self.status == "ok" and not self.right


def evaluate_edits(engine: Engine, examples: Sequence[Example], scope: str, retries: int | None = None,
                   sampled_retries: bool = True) -> list[EditOutcome]:
    """Each example through `hsedit.scope.run_edit`, one at a time (an edit's regions in one batch)."""
    import time

    from hsedit.apply import EmbeddedRunner
    from hsedit.errors import HseditError
    from hsedit.scope import RETRIES, run_edit

    runner = EmbeddedRunner(engine)
    outcomes = []
    for example in examples:
        job = EditJob.for_source(SourceFile.from_text(example.path, example.before), example.path,
                                 example.instruction, example.update)
        started = time.perf_counter()
        try:
            result = run_edit(runner, job, scope=scope, retries=RETRIES if retries is None else retries,
                              sampled_retries=sampled_retries)
        except HseditError as error:
            outcomes.append(EditOutcome(example.path, len(example.before.splitlines()), False,
                                        f"refused: {error.exit_code}", None, time.perf_counter() - started, 0, 0,
                                        engine.count_tokens(example.before)))
            continue
        refusal = result.refusal()
        attempts = sum(r["attempts"] for r in result.regions) if result.regions else 1
        exact = result.new_text == example.after
        intent = parse_intent(example.instruction, example.update)
        right = exact or (isinstance(intent, Rename) and same_rename(example.after, result.new_text, intent.old, intent.new))
        outcomes.append(EditOutcome(
            example.path, len(example.before.splitlines()), exact,
            "ok" if refusal is None else f"refused: {refusal.exit_code}", result.check.ok,
            time.perf_counter() - started, attempts, result.stats.completion_tokens, engine.count_tokens(example.before),
            first_try=all(r["attempts"] == 1 for r in result.regions), right=right,
        ))
    return outcomes


def evaluate_cached(engine_for, model_dir: str, examples: Sequence[Example], dtype: str) -> list[Score]:
    """Each example's score (greedy, in example order) for a merged model directory run in
    `dtype`; kept in hsedit's cache under the model's, the dtype's and the examples' digests, so
    the shipped model is measured once."""
    import hashlib
    import json
    from dataclasses import asdict

    from hsedit.engine.provision import cache_dir

    if not examples:
        return []
    digest = hashlib.sha256(json.dumps([e.__dict__ for e in examples], sort_keys=True).encode()).hexdigest()[:12]
    path = cache_dir() / "eval" / f"{Path(model_dir).name}-{dtype}-{digest}.json"
    if path.is_file():
        return [Score(**row) for row in json.loads(path.read_text())]
    reports = evaluate(engine_for(), examples)
    by_kind = {r.kind: iter(r.scores) for r in reports}
    scores = [next(by_kind[example.kind]) for example in examples]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(s) for s in scores]))
    return scores
