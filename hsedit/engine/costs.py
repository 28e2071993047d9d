"""The cost table: measured time of one target step against the number of scheduled tokens, and
how an engine profiles it (`engine_cost_table`).

Profiled at engine start, or read back from the last profile of the same model, options and
machine (`cached_table`): profiling is most of what the hybrid engine's start costs over a
plain one. It prices verification (the hybrid selector's T(B)) and gives the live
speedup estimate: what the same tokens would have cost at one token per step.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from bisect import bisect_left
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hsedit.engine.provision import cache_dir
from hsedit.engine.requests import GenerationRequest


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
# A saved plain step this much slower than the fastest of a few timed now was profiled while
# something else ran (a build, a training run): the machine is faster than the table says, so
# measure again. The other way round (slower now) keeps the table: the neighbour is the one
# likely to leave. Tight, because a loaded profile flattens the table's cheap end (seen: 1 to 8
# tokens all at 31.7 ms, where an idle profile reads 23.4 to 27.6), and the hybrid then verifies
# chains up to 8 long as if they cost nothing.
LOADED_PROFILE_FACTOR = 1.15


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


# (concurrent requests, filler drafts each) profiled at start: 1 to 1024 scheduled tokens, the
# shapes long chains verify (1, 4 and 16 requests with up to 63 drafts each).
PROFILE_SHAPES = ((1, 0), (1, 3), (1, 7), (1, 15), (1, 31), (1, 63), (4, 7), (4, 15), (4, 31), (4, 63),
                  (16, 15), (16, 31), (16, 63))
PROFILE_PASSES = 2
# What a profile measures, by revision: a table saved by an older one is measured again (2:
# probes at their full length beside others, where 1 cut them to the hybrid's batched cap).
PROFILE_REVISION = 2


def engine_cost_table(engine: Any) -> CostTable:
    """The engine's table: the one saved under its key, else profiled now (and saved)."""
    table, _ = cached_table(
        _cost_key(engine), cache_dir() / "costs", lambda: _profile_costs(engine), plain_step_now=lambda: _plain_step_now(engine)
    )
    return table


def _plain_step_now(engine: Any) -> float | None:
    """A plain step timed now, as the table timed it (one request's median step). Once, not the
    fastest of several: every engine start pays it, and noise only ever makes it slower, which
    keeps the table."""
    return _step_seconds(engine, 1, 0)


def _cost_key(engine: Any) -> dict:
    """Everything a step's cost depends on: the model's weights, the engine's options, the
    machine and the software. A table saved under another key is never used."""
    import platform

    import torch
    import vllm

    weights = Path(engine.model_path)
    files = sorted(weights.glob("*.safetensors")) if weights.is_dir() else []
    options = {k: v for k, v in vars(engine.options).items() if k not in ("quiet", "profile_costs", "seed")}
    return {
        "model": str(weights),
        "weights": [(f.name, f.stat().st_size, int(f.stat().st_mtime)) for f in files],
        "options": options,
        "dtype": engine.options.resolved_dtype,  # and compiled or eager, in the options: a step's price is theirs
        "max_draft": engine.proposer.max_draft if engine.proposer else 0,
        "shapes": [PROFILE_SHAPES, PROFILE_PASSES, PROFILE_REVISION],
        "machine": [platform.machine(), _cpu_model(), os.cpu_count(), torch.get_num_threads()],
        "versions": [vllm.__version__, torch.__version__, _hsedit_version()],
    }


def _profile_costs(engine: Any) -> CostTable:
    """Time decode steps of n requests that each verify k filler draft tokens (n * (1 + k)
    scheduled tokens), for a few n and k; one request with k = 0 is plain decoding."""
    limit = engine.proposer.max_draft if engine.proposer else 0
    shapes = [(n, k) for n, k in PROFILE_SHAPES if k <= limit]
    samples: dict[int, float] = {}
    # Two passes, the faster median kept: noise only ever adds time, and the hybrid's price
    # depends on the table's shape for the engine's whole life.
    for n, k in shapes * PROFILE_PASSES:
        seconds = _step_seconds(engine, n, k)
        if seconds is not None:
            samples[n * (1 + k)] = min(seconds, samples.get(n * (1 + k), seconds))
    return CostTable.from_samples(samples)


def _step_seconds(engine: Any, n: int, k: int) -> float | None:
    """Median time of a decode step of n requests that each verify k filler draft tokens."""
    prompt = [int(t) for t in engine.tokenizer.encode("def profile(x):\n    return x * 2\n" * 6)]
    with engine.proposer.probe(k) if engine.proposer else nullcontext():
        times = []
        last = None
        requests = [GenerationRequest(prompt, max_tokens=8) for _ in range(n)]
        for event in engine.stream(requests):
            if event.key != 0:  # every request advances each step: time one of them
                continue
            now = time.perf_counter()
            if last is not None:
                times.append(now - last)
            last = now
    # None if a filler the target happens to accept ended the run in one step.
    return statistics.median(times[1:] or times) if times else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor()


def _hsedit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hsedit")
    except PackageNotFoundError:
        return "unknown"
