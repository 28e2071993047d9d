"""The cost table: measured time of one target step against the number of scheduled tokens.

Profiled at engine start, or read back from the last profile of the same model, options and
machine (`cached_table`): profiling is most of what the hybrid engine's start costs over a
plain one. It prices verification (the hybrid selector's T(B)) and gives the live
speedup estimate: what the same tokens would have cost at one token per step.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


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


# A saved table is reused for a week at most: drivers, thermal limits and neighbours on a shared
# machine change what a step costs, and a stale price slows every edit without a trace.
CACHE_MAX_AGE_S = 7 * 24 * 3600
# A saved plain step this much slower than one timed now was profiled while something else ran
# (a build, a training run): the machine is faster than the table says, so measure again. The
# other way round (slower now) keeps the table: the neighbour is the one likely to leave.
LOADED_PROFILE_FACTOR = 1.5


def cached_table(
    key: dict,
    directory: Path,
    profile: Callable[[], CostTable],
    plain_step_now: Callable[[], float | None] | None = None,
) -> tuple[CostTable, bool]:
    """The table profiled before under exactly this `key` (model, options, machine, versions)
    and not older than CACHE_MAX_AGE_S, else a fresh `profile()`, saved for next time.
    `plain_step_now` times one plain step now: a saved table whose plain step is more than
    LOADED_PROFILE_FACTOR times slower is measured again. Returns (table, whether reused)."""
    key = json.loads(json.dumps(key, sort_keys=True))  # as it reads back: tuples are lists
    path = directory / (hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20] + ".json")
    try:
        saved = json.loads(path.read_text())
        if saved["key"] == key and 0 <= time.time() - saved["measured_at"] < CACHE_MAX_AGE_S:
            table = CostTable(tuple(int(n) for n in saved["tokens"]), tuple(float(s) for s in saved["seconds"]))
            now = plain_step_now() if plain_step_now is not None else None
            if now is None or table.step_time(1) <= LOADED_PROFILE_FACTOR * now:
                return table, True
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, unreadable or from another hsedit: measure
    table = profile()
    record = {"key": key, "measured_at": time.time(), "tokens": table.tokens, "seconds": table.seconds}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(f".{os.getpid()}.tmp")
        staging.write_text(json.dumps(record))
        os.replace(staging, path)  # never a half-written table for a concurrent start to read
    except OSError:
        pass  # a read-only cache costs the next start its profiling, nothing else
    return table, False
