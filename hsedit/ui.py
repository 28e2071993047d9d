"""Terminal rendering: the live view of a streaming edit and the one-line stats."""

from __future__ import annotations

import time
from typing import Self

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from hsedit.batch import FAILED
from hsedit.drafting.chain import DSPARK, COPY, NO_DRAFTER, TARGET, VLLM_NGRAM, VLLM_SUFFIX
from hsedit.engine.requests import StepEvent
from hsedit.engine.stats import RequestStats

SOURCE_STYLES = {COPY: "green", DSPARK: "cyan", TARGET: "default", VLLM_NGRAM: "green", VLLM_SUFFIX: "green"}
LEGEND = Text.assemble(
    ("copied", SOURCE_STYLES[COPY]), " · ", ("model-drafted", SOURCE_STYLES[DSPARK]), " · generated"
)


def status_line(stats: RequestStats, now: float | None = None) -> str:
    now = time.perf_counter() if now is None else now
    parts = [
        f"{stats.completion_tokens} tok",
        f"{stats.tokens_per_second(now):.1f} tok/s",
    ]
    drafted, accepted = stats.drafted, stats.accepted
    for name in sorted(drafted):
        parts.append(f"{name} {accepted[name]}/{drafted[name]}")
    kept = stats.chains_kept
    if len(kept) > 1:
        parts.append("kept " + "/".join(f"{name} {n}" for name, n in sorted(kept.items())) + " steps")
    if stats.last_price is not None:
        parts.append(f"price {stats.last_price:.2f}")
    parts.append(f"{stats.tokens_per_step:.2f} tok/step")
    speedup = stats.speedup_estimate(now)
    if speedup is not None:
        parts.append(f"~{speedup:.2f}x vs plain")
    return " · ".join(parts)


class LiveEdit:
    """Streams the rewritten file, each token coloured by where it came from. An edit by regions
    streams each region under its own rule (its lines in the file), all at once."""

    def __init__(self, console: Console, title: str, prefix: str = "") -> None:
        self.console = console
        self.title = title
        self.prefix = prefix
        self.sections: dict[str, Text] = {}  # region label ("" for a whole file) -> its text so far
        self.stats: dict[str, RequestStats] = {}
        self._live = Live(console=console, refresh_per_second=8, transient=True)

    def __enter__(self) -> LiveEdit:
        self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._live.__exit__(*exc)

    def update(self, event: StepEvent) -> None:
        label = event.key[1] if isinstance(event.key, tuple) else ""
        text = self.sections.setdefault(label, Text(self.prefix))
        if event.stats is not self.stats.get(label):  # a region asked again starts over
            text.truncate(len(self.prefix))
        for piece, source in event.pieces:
            text.append(piece, style=SOURCE_STYLES.get(source, "default"))
        self.stats[label] = event.stats
        self._live.update(self._render())

    def _render(self) -> Group:
        from hsedit.scope import merged_stats

        height = max(5, self.console.size.height - 4)
        share = max(3, height // max(1, len(self.sections)) - 1)
        parts = []
        for label, text in self.sections.items():
            if label:
                parts.append(Rule(label, style="dim", align="left"))
            parts.append(Text("\n").join(text.split("\n")[-share:]))
        stats = merged_stats(list(self.stats.values())) if len(self.stats) > 1 else next(iter(self.stats.values()), None)
        status = status_line(stats) if stats else ""
        return Group(Rule(self.title, style="dim"), *parts, Rule(style="dim"), Text(status), LEGEND)


def _exactness(cell) -> str:
    """`yes`: token-identical to plain decoding; `greedy`: some outputs differ, every token
    within the dtype's tolerance of the top choice; `sampled`: some sampled outputs differ (no
    tolerance measured); `NO`: a token past the tolerance (with plain decoding's own worst gap on
    those tasks, scored alike: the dtype's noise there)."""
    if cell.mismatches:
        return f"NO ({len(cell.mismatches)}: {cell.worst_gap:.2f} nats, plain's own {cell.plain_worst_gap:.2f})"
    if cell.sampled_differs:
        return f"sampled ({cell.identical}/{cell.outputs} identical)"
    if cell.identical < cell.outputs:
        return f"greedy ({cell.identical}/{cell.outputs} identical)"
    return "yes"


def _paired(ratio) -> str:
    """A ratio with its rounds' 95% interval; `trails` where the whole interval lies below 1."""
    if ratio is None:
        return "–"
    if ratio.interval is None:
        return f"{ratio.whole:.2f}x"
    low, high = ratio.interval
    verdict = ", trails" if ratio.trails else "" if ratio.same_answers else ", other answers"
    return f"{ratio.whole:.2f}x ({low:.2f}–{high:.2f}{verdict})"


def bench_table(report) -> Table:
    step = f" · plain step {report.plain_step_ms:.0f} ms" if report.plain_step_ms else ""
    sampled = f" · sampled at temperature {report.temperature:g}, seeded" if report.temperature else ""
    table = Table(title=f"hsedit bench · {report.repeats} round(s), methods interleaved; ratios from this run{step}{sampled}")
    columns = ("workload", "batch", "method", "s/run", "of file", "tok/s", "vs plain", "vs copy", "vs vLLM ngram (best)", "vs dspark",
               "vs better part", "tok/step", "accepted/drafted", "proposer ms/step", "dspark runs", "limit s", "of limit", "of machine", "prefill",
               "exact")
    for column in columns:
        table.add_column(column, justify="left" if column in ("workload", "method", "accepted/drafted") else "right")
    for c in report.cells:
        distance = report.edit_distance.get(c.workload)
        workload = c.workload + (f" ({distance:.0%} edit)" if distance is not None else "")
        if report.refused.get(c.workload):
            workload += f" ({len(report.refused[c.workload])} refused by the guard)"
        if report.check_failed.get(c.workload):
            workload += f" ({len(report.check_failed[c.workload])} fail the instruction check)"
        if c.skipped:
            table.add_row(workload, str(c.batch_size), c.method, "skipped", *[""] * 8, escape(c.skipped), *[""] * 7)
            continue
        ratios = [report.ratio(c, NO_DRAFTER), report.ratio(c, COPY), report.ratio_to_best(c, VLLM_NGRAM),
                  report.ratio(c, DSPARK)]
        acceptance = " · ".join(f"{name} {a}/{d}" for name, (a, d) in c.acceptance().items()) or "–"
        proposer = f"{c.proposer_ms_per_step:.2f}" if c.proposer_ms_per_step is not None else "–"
        table.add_row(
            workload, str(c.batch_size), c.method,
            f"{c.seconds_per_run:.1f}" if c.seconds_per_run else "–", f"{c.of_file:.2f}" if c.of_file else "–",
            f"{c.tokens_per_second:.1f}",
            *(f"{r:.2f}x" if r else "–" for r in ratios),
            _paired(report.ratio_to_best_single(c)), f"{c.tokens_per_step:.2f}", acceptance, proposer,
            f"{c.model_run_share:.0%}" if c.model_run_share is not None else "–",
            f"{c.limit_seconds:.1f}" if c.limit_seconds else "–",
            f"{c.limit_share:.0%}" if c.limit_share is not None else "–",
            f"{c.machine_share:.1%}" if c.machine_share is not None else "–",
            f"{c.prefill_share:.0%}" if c.prefill_share is not None else "–",
            _exactness(c),
        )
    table.caption = "  ".join(
        f"{dtype}: greedy within {report.tolerance[dtype]:g} nats, the larger of its rounding bound and plain "
        f"decoding's own largest margin shift in this run ({n.largest_shift:g} over {n.positions:,} positions)."
        for dtype, n in report.noise.items()
    ) or None
    return table


def eval_table(model: str, rows: list[dict]) -> Table:
    table = Table(title=f"apply model evaluation · {model}")
    for column in ("kind", "n", "exact", "unchanged lines kept", "parses", "similarity", "cut off",
                   "answered unchanged", "check: passed / failed / unchecked", "passed, not exact", "false rejects"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    for row in rows:
        table.add_row(
            row["kind"], str(row["n"]), f"{row['exact']:.0%}", f"{row['unchanged_lines_kept']:.1%}",
            f"{row['parses']:.0%}", f"{row['similarity']:.3f}", f"{row['cut_off']:.0%}",
            f"{row['answered_unchanged']:.0%}", f"{row['check_passed']} / {row['check_failed']} / {row['unchecked']}",
            str(row["passed_not_exact"]), str(row["false_rejects"]),
        )
    return table


class BatchProgress:
    """`hsedit batch`'s progress bar: edits done, and tok/s and acceptance over all of them."""

    def __init__(self, console: Console, total: int, show: bool = True) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.tokens = self.accepted = self.drafted = 0
        self.started = time.perf_counter()
        self.progress = Progress(
            TextColumn("edits"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}"), console=console, disable=not show,
        )
        self.bar = self.progress.add_task(self._line(), total=total)

    def __enter__(self) -> Self:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def on_step(self, event: StepEvent) -> None:
        self.tokens += len(event.token_ids)
        self.accepted += event.record.accepted
        self.drafted += event.record.drafted
        self.progress.update(self.bar, description=self._line())

    def on_done(self, outcome) -> None:
        self.progress.advance(self.bar)
        if outcome.status == FAILED:
            self.progress.console.print(
                f"hsedit: {outcome.path}: {outcome.error}", style="red", soft_wrap=True, highlight=False
            )

    def _line(self) -> str:
        elapsed = max(1e-6, time.perf_counter() - self.started)
        acceptance = f"{self.accepted}/{self.drafted}" if self.drafted else "–"
        return f"{self.tokens / elapsed:.1f} tok/s · accepted {acceptance}"


def _check_note(check: dict | None) -> str:
    """What the instruction check said of a task that did not fail: 'unchecked: why', or a
    checked 'nothing to do'."""
    if not check:
        return ""
    if check.get("ok") is None:
        return f"unchecked: {check.get('reason', '')}"
    return check["reason"] if str(check.get("reason", "")).startswith("nothing to do") else "checked"


def batch_table(outcomes, skipped: int = 0) -> Table:
    title = "hsedit batch" + (f" · {skipped} task(s) already done, skipped" if skipped else "")
    table = Table(title=title)
    for column in ("file", "status", "tokens", "tok/step", "note"):
        table.add_column(column, justify="left" if column in ("file", "status", "note") else "right")
    styles = {"ok": "green", "unchanged": "dim", "failed": "red"}
    for outcome in outcomes:
        stats = outcome.stats or {}
        note = escape(outcome.error or "; ".join(filter(None, [_check_note(outcome.check), "written" if outcome.written else ""])))
        table.add_row(
            escape(outcome.path), f"[{styles[outcome.status]}]{outcome.status}[/]",
            str(stats.get("completion_tokens", "–")), str(stats.get("tokens_per_step", "–")), note,
        )
    return table
