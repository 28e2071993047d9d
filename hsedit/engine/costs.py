"""The cost table: measured time of one target step against the number of scheduled tokens.

Profiled once at engine start. It prices verification (the hybrid selector's T(B)) and gives the live
speedup estimate: what the same tokens would have cost at one token per step.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass


@dataclass(frozen=True)
class CostTable:
    tokens: tuple[int, ...]  # scheduled tokens per step, increasing
    seconds: tuple[float, ...]  # time of one step, non-decreasing

    @classmethod
    def from_samples(cls, samples: dict[int, float]) -> CostTable:
        """Sort by size and force monotonicity: a bigger step never costs less."""
        if not samples:
            raise ValueError("a cost table needs at least one sample")
        tokens = tuple(sorted(samples))
        seconds, running = [], 0.0
        for n in tokens:
            running = max(running, samples[n])
            seconds.append(running)
        return cls(tokens, tuple(seconds))

    def step_time(self, num_tokens: float) -> float:
        """Piecewise-linear interpolation; flat below the smallest step, and beyond the largest
        the last segment's slope continues (a step twice as big is not free)."""
        tokens, seconds = self.tokens, self.seconds
        if num_tokens <= tokens[0]:
            return seconds[0]
        if num_tokens >= tokens[-1]:
            if len(tokens) == 1:
                return seconds[-1]
            slope = (seconds[-1] - seconds[-2]) / (tokens[-1] - tokens[-2])
            return seconds[-1] + slope * (num_tokens - tokens[-1])
        i = bisect_left(tokens, num_tokens)
        lo, hi = tokens[i - 1], tokens[i]
        frac = (num_tokens - lo) / (hi - lo)
        return seconds[i - 1] + frac * (seconds[i] - seconds[i - 1])
