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
    """One generation. `prompt` is text (tokenized by the engine) or token ids; `max_tokens`
    caps the answer; `temperature` 0 is greedy (the default), above it sampling (`seed` fixes
    the draws: with hsedit's drafters or none, the same seed gives the same answer whichever
    drafts); the answer stops before any of `stop`."""

    prompt: str | Sequence[int]
    max_tokens: int = 2048
    temperature: float = 0.0
    seed: int | None = None
    stop: list[str] | None = None  # stop strings, excluded from the output
    # Text (or token ids) the answer is expected to repeat, as OpenAI's Predicted Outputs: it
    # seeds the copy drafter's index beside the prompt and never changes the output.
    prediction: str | Sequence[int] | None = None
    # Stop the answer once it ends in a loop (engine/repetition.py) that `prediction` does not
    # hold, finish reason "repetition": for answers that rewrite a text, where a loop is a runaway.
    stop_repeating: bool = False
    # Per answer token, the log-probabilities of the step that computed it: of the token and of
    # the `logprobs` top choices there (0: none kept). What the bench measures the dtype's noise by.
    logprobs: int = 0


@dataclass
class StepEvent:
    """What one request gained in one engine step: what `Engine.stream` yields.

    A step adds one or more tokens to a request: the draft tokens verification kept, then the
    target's own. `token_ids`, `sources` and `pieces` describe the same tokens three ways."""

    key: Any  # what the request was added with: in stream() and generate_each(), its position in the list given
    request_id: str  # vLLM's id for it (what `Engine.abort` takes)
    token_ids: list[int]  # the tokens this step added
    sources: list[str]  # one per token: "target" (the model's own) or the drafter that drafted it ("copy", "dspark")
    pieces: list[tuple[str, str]]  # (text, source) runs of those tokens, decoded for display
    text: str  # vLLM's own text delta: stop strings cut, special tokens skipped (what the answer is)
    finished: bool  # the request's last event: stop, stop string or max_tokens reached
    record: StepRecord  # this step's record: chain verified, drafted, matched (the last of `stats.steps`)
    stats: RequestStats  # the request's stats so far (the same object on every event: it keeps growing)
    logprobs: list[dict[int, float]] = field(default_factory=list)  # per token, with `GenerationRequest.logprobs`


@dataclass
class Generation:
    """A finished request: every token it produced, each token's source, vLLM's text (stop
    strings cut) and the request's stats (steps, drafts, timings, finish reason)."""

    token_ids: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    text: str = ""
    stats: RequestStats = field(default_factory=RequestStats)
    logprobs: list[dict[int, float]] = field(default_factory=list)  # per token, with `GenerationRequest.logprobs`
