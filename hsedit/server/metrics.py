"""The server's counters, in Prometheus' text format (`GET /metrics`).

Written by the engine thread (steps, tokens, drafts) and `CountRequests` (every HTTP request and
its status); plain integer and float updates, read without a lock: a scrape may see one step
half counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from hsedit.engine.requests import StepEvent


class Metrics:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()  # (endpoint, HTTP status) -> count
        self.finished: Counter[str] = Counter()  # finish reason -> requests
        self.aborted = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.drafted: Counter[str] = Counter()  # drafter -> draft tokens verified
        self.accepted: Counter[str] = Counter()  # drafter -> draft tokens kept
        self.steps = 0
        self.step_seconds = 0.0

    def record_step(self, seconds: float, events: Iterable[StepEvent]) -> None:
        self.steps += 1
        self.step_seconds += seconds
        for event in events:
            record = event.record
            self.completion_tokens += len(event.token_ids)
            if record.source and record.drafted:
                self.drafted[record.source] += record.drafted
                self.accepted[record.source] += record.accepted
            if event.finished:
                self.prompt_tokens += event.stats.prompt_tokens
                self.finished[event.stats.finish_reason or "unknown"] += 1

    def render(self, *, waiting: int, running: int, dspark_target_matches: bool | None = None) -> str:
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float]]) -> None:
            lines.append(f"# HELP hsedit_{name} {help_text}")
            lines.append(f"# TYPE hsedit_{name} {kind}")
            lines.extend(f"hsedit_{name}{labels} {_number(value)}" for labels, value in samples)

        def by(label: str, counts: Counter, key: Callable = lambda k: k) -> list[tuple[str, float]]:
            return [(f'{{{label}="{key(k)}"}}', v) for k, v in sorted(counts.items())]

        metric("http_requests_total", "counter", "HTTP requests by endpoint and status.",
               [(f'{{endpoint="{e}",status="{s}"}}', n) for (e, s), n in sorted(self.requests.items())])
        metric("requests_finished_total", "counter", "Generations finished, by finish reason.",
               by("reason", self.finished))
        metric("requests_aborted_total", "counter", "Generations aborted (client gone, shutdown).",
               [("", self.aborted)])
        metric("prompt_tokens_total", "counter", "Prompt tokens of finished generations.", [("", self.prompt_tokens)])
        metric("completion_tokens_total", "counter", "Tokens generated.", [("", self.completion_tokens)])
        metric("draft_tokens_total", "counter", "Draft tokens verified, by drafter.", by("drafter", self.drafted))
        metric("accepted_draft_tokens_total", "counter", "Draft tokens the target kept, by drafter.",
               by("drafter", self.accepted))
        metric("engine_steps_total", "counter", "Engine steps run.", [("", self.steps)])
        metric("engine_step_seconds_total", "counter", "Time spent in engine steps.", [("", self.step_seconds)])
        metric("requests_waiting", "gauge", "Requests accepted, not yet in the engine.", [("", waiting)])
        metric("requests_running", "gauge", "Requests in the engine.", [("", running)])
        if dspark_target_matches is not None:
            metric("dspark_target_matches", "gauge", "1 if the DSpark drafter was trained for the served target.",
                   [("", int(dspark_target_matches))])
        return "\n".join(lines) + "\n"


class CountRequests:
    """Counts every HTTP request by endpoint and status, refusals (401, 413, 429, ...) included.
    The endpoint is one of `endpoints` (the app's own routes) or "other": a client cannot grow
    the metric with paths of its own making. Plain ASGI, so streamed answers and disconnects
    pass through untouched; the status is the one the response started with."""

    def __init__(self, app: Any, metrics: Metrics, endpoints: Iterable[str]) -> None:
        self.app, self.metrics, self.endpoints = app, metrics, frozenset(endpoints)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what a response that never started counts as

        async def counted(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            path = scope["path"]
            self.metrics.requests[(path if path in self.endpoints else "other", status)] += 1


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6f}"
