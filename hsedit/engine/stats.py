"""Per-request accounting: which drafter proposed what, what the target kept, how fast."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hsedit.drafting.chain import TARGET, VLLM_BUILTINS, StepRecord


@dataclass
class RequestStats:
    prompt_tokens: int = 0
    # Prompt tokens vLLM's prefix cache served: the target did not run them.
    cached_prompt_tokens: int = 0
    steps: list[StepRecord] = field(default_factory=list)
    started_at: float = 0.0
    first_token_at: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None
    # Time of one plain (one-token) step, from the cost table: the speedup estimate's yardstick.
    plain_estimate_s: float | None = None
    # vLLM's own count of (verified draft tokens, accepted draft tokens), set when finished.
    engine_reported: tuple[int, int] | None = None

    def record(self, step: StepRecord, now: float) -> None:
        if self.first_token_at is None and step.emitted:
            self.first_token_at = now
        self.steps.append(step)

    @property
    def completion_tokens(self) -> int:
        return sum(len(s.emitted) for s in self.steps)

    @property
    def drafted(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for s in self.steps:
            if s.source:
                out[s.source] += s.drafted
        if self.engine_reported and len(out) == 1 and set(out) <= set(VLLM_BUILTINS):
            # vLLM's built-in drafters propose out of our sight: take the scheduler's count.
            out[next(iter(out))] = self.engine_reported[0]
        return out

    @property
    def accepted(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for s in self.steps:
            if s.source:
                out[s.source] += s.accepted
        return out

    @property
    def accepted_prediction_tokens(self) -> int:
        return sum(s.accepted for s in self.steps)

    @property
    def rejected_prediction_tokens(self) -> int:
        return sum(self.drafted.values()) - self.accepted_prediction_tokens

    @property
    def elapsed_s(self) -> float:
        return max(0.0, (self.finished_at or 0.0) - self.started_at)

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started_at

    def tokens_per_second(self, now: float | None = None) -> float:
        end = self.finished_at if now is None else now
        elapsed = (end or 0.0) - self.started_at
        return self.completion_tokens / elapsed if elapsed > 0 else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.completion_tokens / len(self.steps) if self.steps else 0.0

    def speedup_estimate(self, now: float | None = None) -> float | None:
        """Cost-table time of these tokens at one token per step, over the decode time seen.

        Decode time runs from the first token on, so prefill (the same for both) is left out.
        """
        end = self.finished_at if now is None else now
        if self.plain_estimate_s is None or self.first_token_at is None or end is None:
            return None
        decode_s = end - self.first_token_at
        decoded = self.completion_tokens - len(self.steps[0].emitted) if self.steps else 0
        if decode_s <= 0 or decoded <= 0:
            return None
        return decoded * self.plain_estimate_s / decode_s

    def as_dict(self) -> dict:
        drafted, accepted = self.drafted, self.accepted
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "accepted_prediction_tokens": self.accepted_prediction_tokens,
            "rejected_prediction_tokens": self.rejected_prediction_tokens,
            "engine_steps": len(self.steps),
            "tokens_per_step": round(self.tokens_per_step, 3),
            "tokens_per_second": round(self.tokens_per_second(), 3),
            "time_to_first_token_s": None if self.ttft_s is None else round(self.ttft_s, 4),
            "elapsed_s": round(self.elapsed_s, 4),
            "speedup_estimate": _round(self.speedup_estimate()),
            "finish_reason": self.finish_reason,
            "drafters": {
                name: {"drafted": drafted[name], "accepted": accepted[name]}
                for name in sorted(set(drafted) | set(accepted))
            },
            "tokens_by_source": dict(self.tokens_by_source()),
            "chains_kept": dict(self.chains_kept),
            # One entry per engine step: [drafter kept or null, drafted, accepted, price or null].
            "step_log": [
                [s.source, s.drafted, s.accepted, None if s.price is None else round(s.price, 4)]
                for s in self.steps
            ],
            "engine_reported": (
                None
                if self.engine_reported is None
                else {"drafted": self.engine_reported[0], "accepted": self.engine_reported[1]}
            ),
        }

    @property
    def chains_kept(self) -> Counter[str]:
        """Steps per drafter whose chain was verified (the hybrid's choice, step by step)."""
        return Counter(s.source for s in self.steps if s.source and s.drafted)

    @property
    def last_price(self) -> float | None:
        return next((s.price for s in reversed(self.steps) if s.price is not None), None)

    def tokens_by_source(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for s in self.steps:
            if s.accepted:
                out[s.source or TARGET] += s.accepted
            out[TARGET] += len(s.emitted) - s.accepted
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
