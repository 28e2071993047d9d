"""What goes into an engine and what comes out of it, step by step: the vocabulary the engine,
the edit pipeline, the server and its clients share. Light on purpose (no torch, no vLLM): a
client of `hsedit serve` builds the same events from the server's stream."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hsedit.drafting.chain import StepRecord
from hsedit.engine.stats import RequestStats


@dataclass
class GenerationRequest:
    prompt: str | Sequence[int]
    max_tokens: int = 2048
    temperature: float = 0.0
    seed: int | None = None
    stop: list[str] | None = None  # stop strings, excluded from the output
    # Text (or token ids) the answer is expected to repeat, as OpenAI's Predicted Outputs: it
    # seeds the copy drafter's index beside the prompt and never changes the output.
    prediction: str | Sequence[int] | None = None


@dataclass
class StepEvent:
    """What one request gained in one engine step."""

    index: Any  # the key it was added with: in stream(), its position in the list given
    request_id: str
    token_ids: list[int]
    sources: list[str]  # one per token: "target" or the drafter name
    pieces: list[tuple[str, str]]  # (text, source) runs, for display
    text: str  # vLLM's own text delta: stop strings cut, special tokens skipped
    finished: bool
    record: StepRecord  # this step's record (also the last of `stats.steps` when it was made)
    stats: RequestStats  # the request's stats so far: keeps growing until it finishes


@dataclass
class Generation:
    token_ids: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    text: str = ""
    stats: RequestStats = field(default_factory=RequestStats)
